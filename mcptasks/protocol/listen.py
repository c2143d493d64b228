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
import time
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections

from mcptasks import access, events, metrics
from mcptasks.models import TERMINAL_STATES, Task
from mcptasks.protocol.call import META_SUBSCRIPTION, Call
from mcptasks.protocol.errors import invalid_params
from mcptasks.protocol.hub import hub
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
        visible = set(
            access.visible_tasks(user).filter(pk__in=task_ids).values_list("pk", flat=True)
        )
        return [t for t in task_ids if t in visible]
    finally:
        close_old_connections()


def _snapshot(
    user: Any, task_ids: list[str], capabilities: dict[str, Any]
) -> dict[str, tuple[int, bool, dict[str, Any]]]:
    """``{task id: (version, terminal, DetailedTask)}`` read through the viewer's access, with
    the input requests the listen request's capabilities can take — what its tasks/get shows."""
    try:
        found: dict[str, tuple[int, bool, dict[str, Any]]] = {}
        for task in Task.objects.select_related("tenant").filter(pk__in=task_ids):
            if access.can(user, access.Action.VIEW, task):
                found[task.pk] = (
                    task.version,
                    task.state in TERMINAL_STATES,
                    detailed_for(user, task, capabilities),
                )
        return found
    finally:
        close_old_connections()


def sse(message: dict[str, Any]) -> bytes:
    return (
        b"data: "
        + json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
        + b"\n\n"
    )


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
        opened = time.monotonic()
        acked = None
        if self.requested is not None:
            requested = self.requested
            acked = await hub().fresh(
                ("visible", user.pk, tuple(requested)),
                opened,
                lambda: sync_to_async(_visible_ids, thread_sensitive=False)(user, requested),
            )
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-cache"),
                    (b"x-accel-buffering", b"no"),
                ],
            }
        )
        agreed: dict[str, Any] = {} if acked is None else {"taskIds": acked}
        await send(
            {
                "type": "http.response.body",
                "more_body": True,
                "body": sse(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/subscriptions/acknowledged",
                        "params": {"_meta": self._meta(), "notifications": agreed},
                    }
                ),
            }
        )
        local = hub()
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        groups = [f"task.{task_id}" for task_id in acked or []]
        open_streams += 1
        metrics.LISTEN_STREAMS.inc()
        events.remember_loop(asyncio.get_running_loop())
        disconnected = asyncio.Event()
        watcher = asyncio.create_task(self._watch_disconnect(receive, disconnected))
        try:
            for group in groups:
                await local.subscribe(group, queue)
            await self._loop(send, user, acked or [], queue, disconnected)
        except (asyncio.CancelledError, OSError):
            pass
        finally:
            open_streams -= 1
            metrics.LISTEN_STREAMS.dec()
            watcher.cancel()
            for group in groups:
                await local.unsubscribe(group, queue)

    async def _watch_disconnect(self, receive: Any, disconnected: asyncio.Event) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                disconnected.set()
                return

    async def _deliver(
        self,
        send: Any,
        user: Any,
        task_ids: list[str],
        notified_version: int | None = None,
        since: float | None = None,
    ) -> None:
        read = sync_to_async(_snapshot, thread_sensitive=False)
        capabilities = self.call.capabilities
        viewer = (user.pk, json.dumps(capabilities, sort_keys=True, default=str))
        if notified_version is not None and len(task_ids) == 1:
            # Every stream of this viewer notified of this version shares one read.
            snapshot = await hub().shared(
                (*viewer, task_ids[0], notified_version), lambda: read(user, task_ids, capabilities)
            )
        elif since is not None:
            snapshot = await hub().fresh(
                ("snapshot", *viewer, tuple(task_ids)),
                since,
                lambda: read(user, task_ids, capabilities),
            )
        else:
            snapshot = await read(user, task_ids, capabilities)
        for task_id in task_ids:
            if task_id not in snapshot:
                self.done.add(task_id)  # purged or no longer visible: nothing more to send
                continue
            version, terminal, detailed = snapshot[task_id]
            if self.sent_versions.get(task_id, 0) >= version:
                continue
            self.sent_versions[task_id] = version
            await send(
                {
                    "type": "http.response.body",
                    "more_body": True,
                    "body": sse(
                        {
                            "jsonrpc": "2.0",
                            "method": "notifications/tasks",
                            "params": {**detailed, "_meta": self._meta()},
                        }
                    ),
                }
            )
            if terminal:
                self.done.add(task_id)

    async def _loop(
        self,
        send: Any,
        user: Any,
        task_ids: list[str],
        queue: asyncio.Queue[dict[str, Any]],
        disconnected: asyncio.Event,
    ) -> None:
        """Deliver current state, then every newer version the hub reports (broadcasts and
        its periodic catch-up), until every task is terminal and delivered."""
        await self._deliver(send, user, task_ids, since=time.monotonic())
        loop = asyncio.get_running_loop()
        last_write = loop.time()
        keepalive_s = settings.MCPTASKS_STREAM_KEEPALIVE_S
        stop = asyncio.ensure_future(disconnected.wait())
        try:
            while not disconnected.is_set():
                if task_ids and self.done >= set(task_ids):
                    await send(
                        {
                            "type": "http.response.body",
                            "more_body": False,
                            "body": sse(
                                {
                                    "jsonrpc": "2.0",
                                    "id": self.call.id,
                                    "result": {"resultType": "complete", "_meta": self._meta()},
                                }
                            ),
                        }
                    )
                    return
                receiving = asyncio.ensure_future(queue.get())
                finished, _ = await asyncio.wait(
                    {receiving, stop},
                    timeout=max(keepalive_s - (loop.time() - last_write), 0.01),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if receiving in finished:
                    message = receiving.result()
                    task_id, version = message.get("task_id"), message.get("version", 0)
                    if task_id in task_ids and version > self.sent_versions.get(task_id, 0):
                        await self._deliver(send, user, [task_id], notified_version=version)
                        last_write = loop.time()
                    continue
                receiving.cancel()
                if loop.time() - last_write >= keepalive_s:
                    await send(
                        {
                            "type": "http.response.body",
                            "more_body": True,
                            "body": b": keep-alive\n\n",
                        }
                    )
                    last_write = loop.time()
        finally:
            stop.cancel()
