"""``subscriptions/listen``: an SSE stream of ``notifications/tasks`` (PROTOCOL §2.6, §4.7).

After the acknowledgement the stream sends each acknowledged task's current state, then a new
state whenever a broadcast ``(task id, version)`` is ahead of what it sent. The channel layer
delivers at most once, so the stream also re-reads the versions of its unfinished tasks every
``MCPTASKS_STREAM_CATCH_UP_S`` seconds; a terminal state is therefore always delivered. Once every task is
terminal and delivered the stream ends with the closing result.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import close_old_connections

from mcptasks import access, events, metrics
from mcptasks.models import TERMINAL_STATES, Task
from mcptasks.protocol.call import META_SUBSCRIPTION, Call
from mcptasks.protocol.errors import invalid_params
from mcptasks.protocol.tasks import detailed_for

log = logging.getLogger(__name__)

MAX_TASK_IDS = 1000
open_streams = 0


def parse_listen(call: Call) -> list[str] | None:
    """The requested task ids (None when the client asked for no task notifications)."""
    notifications = call.params.get("notifications")
    if not isinstance(notifications, dict):
        raise invalid_params("params.notifications must be an object")
    task_ids = notifications.get("taskIds")
    if task_ids is None or task_ids is False:
        return None
    if not isinstance(task_ids, list) or not all(isinstance(t, str) for t in task_ids):
        raise invalid_params("notifications.taskIds must be an array of strings")
    if len(task_ids) > MAX_TASK_IDS:
        raise invalid_params(f"notifications.taskIds may list at most {MAX_TASK_IDS} ids")
    return list(dict.fromkeys(task_ids))


def _visible_ids(user: Any, task_ids: list[str]) -> list[str]:
    try:
        visible = set(access.visible_tasks(user).filter(pk__in=task_ids)
                      .values_list("pk", flat=True))
        return [t for t in task_ids if t in visible]
    finally:
        close_old_connections()


def _snapshot(user: Any, task_ids: list[str]) -> dict[str, tuple[int, bool, dict[str, Any]]]:
    """``{task id: (version, terminal, DetailedTask)}`` read through the viewer's access."""
    try:
        found: dict[str, tuple[int, bool, dict[str, Any]]] = {}
        for task in Task.objects.select_related("tenant").filter(pk__in=task_ids):
            if access.can(user, access.Action.VIEW, task):
                found[task.pk] = (task.version, task.state in TERMINAL_STATES,
                                  detailed_for(user, task))
        return found
    finally:
        close_old_connections()


def sse(message: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(message, separators=(",", ":"),
                                  ensure_ascii=False).encode() + b"\n\n"


class ListenStream:
    """One ``subscriptions/listen`` response, alive as long as the client keeps it open."""

    def __init__(self, call: Call, task_ids: list[str] | None) -> None:
        self.call = call
        self.requested = task_ids
        self.sent_versions: dict[str, int] = {}
        self.done: set[str] = set()

    def _meta(self) -> dict[str, Any]:
        return {META_SUBSCRIPTION: self.call.id}

    async def run(self, receive: Any, send: Any) -> None:
        global open_streams
        user = self.call.principal.user
        acked = None
        if self.requested is not None:
            acked = await sync_to_async(_visible_ids, thread_sensitive=False)(
                user, self.requested)
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no")]})
        agreed: dict[str, Any] = {} if acked is None else {"taskIds": acked}
        await send({"type": "http.response.body", "more_body": True, "body": sse({
            "jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
            "params": {"_meta": self._meta(), "notifications": agreed}})})
        layer = get_channel_layer()
        channel = await layer.new_channel() if layer is not None else None
        groups = [f"task.{task_id}" for task_id in acked or []]
        open_streams += 1
        metrics.LISTEN_STREAMS.inc()
        events.remember_loop(asyncio.get_running_loop())
        disconnected = asyncio.Event()
        watcher = asyncio.create_task(self._watch_disconnect(receive, disconnected))
        try:
            if channel is not None:
                for group in groups:
                    await layer.group_add(group, channel)
            await self._loop(send, user, acked or [], channel, disconnected)
        except (asyncio.CancelledError, OSError):
            pass
        finally:
            open_streams -= 1
            metrics.LISTEN_STREAMS.dec()
            watcher.cancel()
            if channel is not None:
                for group in groups:
                    await layer.group_discard(group, channel)

    async def _watch_disconnect(self, receive: Any, disconnected: asyncio.Event) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                disconnected.set()
                return

    async def _deliver(self, send: Any, user: Any, task_ids: list[str]) -> None:
        snapshot = await sync_to_async(_snapshot, thread_sensitive=False)(user, task_ids)
        for task_id in task_ids:
            if task_id not in snapshot:
                self.done.add(task_id)  # purged or no longer visible: nothing more to send
                continue
            version, terminal, detailed = snapshot[task_id]
            if self.sent_versions.get(task_id, 0) >= version:
                continue
            self.sent_versions[task_id] = version
            await send({"type": "http.response.body", "more_body": True, "body": sse({
                "jsonrpc": "2.0", "method": "notifications/tasks",
                "params": {**detailed, "_meta": self._meta()}})})
            if terminal:
                self.done.add(task_id)

    async def _loop(self, send: Any, user: Any, task_ids: list[str], channel: str | None,
                    disconnected: asyncio.Event) -> None:
        layer = get_channel_layer()
        await self._deliver(send, user, task_ids)
        loop = asyncio.get_running_loop()
        last_catch_up = last_write = loop.time()
        keepalive_s = settings.MCPTASKS_STREAM_KEEPALIVE_S
        catch_up_s = settings.MCPTASKS_STREAM_CATCH_UP_S
        while not disconnected.is_set():
            if task_ids and self.done >= set(task_ids):
                await send({"type": "http.response.body", "more_body": False, "body": sse({
                    "jsonrpc": "2.0", "id": self.call.id,
                    "result": {"resultType": "complete", "_meta": self._meta()}})})
                return
            wait = min(keepalive_s - (loop.time() - last_write),
                       catch_up_s - (loop.time() - last_catch_up))
            changed: list[str] = []
            if channel is not None:
                receiving = asyncio.ensure_future(layer.receive(channel))
                stop = asyncio.ensure_future(disconnected.wait())
                finished, _ = await asyncio.wait({receiving, stop}, timeout=max(wait, 0.01),
                                                 return_when=asyncio.FIRST_COMPLETED)
                stop.cancel()
                if receiving in finished:
                    message = receiving.result()
                    task_id = message.get("task_id")
                    if task_id in task_ids and message.get("version", 0) > \
                            self.sent_versions.get(task_id, 0):
                        changed.append(task_id)
                else:
                    receiving.cancel()
            else:
                await asyncio.sleep(max(wait, 0.01))
            now = loop.time()
            if now - last_catch_up >= catch_up_s:
                changed = [t for t in task_ids if t not in self.done]
                last_catch_up = now
            if changed:
                await self._deliver(send, user, changed)
                last_write = loop.time()
            elif now - last_write >= keepalive_s:
                await send({"type": "http.response.body", "more_body": True,
                            "body": b": keep-alive\n\n"})
                last_write = now
