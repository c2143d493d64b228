"""One channel-layer subscription per process, fanned out to the streams of that process.

A stream subscribes to ``task.<id>`` here instead of on the channel layer: the hub holds one
layer channel per event loop, joins each group once (while it has local subscribers), and puts
every ``(task id, version)`` it receives on the local queues. With Redis that is one group
membership per process and task instead of one per stream.

Reads are shared too: streams of the same viewer notified of the same ``(task, version)`` await
one database read (whose result is at least that version, since it starts after the notice).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)
SHARED_READ_TTL_S = 1.0
GONE = 2**62


class Hub:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.layer = get_channel_layer()
        self.channel: str | None = None
        self.reader: asyncio.Task[None] | None = None
        self.queues: dict[str, set[asyncio.Queue[dict[str, Any]]]] = {}
        self.lock = asyncio.Lock()
        self.reads: dict[tuple[Any, ...], tuple[float, asyncio.Future[Any]]] = {}
        self.catch_up: asyncio.Task[None] | None = None
        self.latest: dict[tuple[Any, ...], tuple[float, asyncio.Future[Any]]] = {}

    async def subscribe(self, group: str, queue: asyncio.Queue[dict[str, Any]]) -> None:
        async with self.lock:
            if self.catch_up is None or self.catch_up.done():
                self.catch_up = asyncio.create_task(self._catch_up())
            if self.layer is not None and self.channel is None:
                self.channel = await self.layer.new_channel()
                self.reader = asyncio.create_task(self._read())
            first = group not in self.queues
            self.queues.setdefault(group, set()).add(queue)
            if first and self.layer is not None and self.channel is not None:
                await self.layer.group_add(group, self.channel)

    async def unsubscribe(self, group: str, queue: asyncio.Queue[dict[str, Any]]) -> None:
        async with self.lock:
            members = self.queues.get(group)
            if members is None:
                return
            members.discard(queue)
            if members:
                return
            del self.queues[group]
            if self.layer is not None and self.channel is not None:
                with contextlib.suppress(Exception):  # membership also expires on its own
                    await self.layer.group_discard(group, self.channel)

    async def _read(self) -> None:
        assert self.layer is not None and self.channel is not None
        while True:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("channel layer receive failed; retrying", exc_info=True)
                await asyncio.sleep(1)
                continue
            for queue in self.queues.get(f"task.{message.get('task_id')}", ()):
                queue.put_nowait(message)

    async def _catch_up(self) -> None:
        """The channel layer delivers at most once: every few seconds read the versions of
        every subscribed task in one query and notify the streams as a broadcast would."""
        from django.conf import settings

        while True:
            await asyncio.sleep(settings.MCPTASKS_STREAM_CATCH_UP_S)
            task_ids = [group.removeprefix("task.") for group in self.queues]
            if not task_ids:
                continue
            try:
                versions = await sync_to_async(_versions, thread_sensitive=False)(task_ids)
            except Exception:
                log.warning("stream catch-up read failed", exc_info=True)
                continue
            for task_id in task_ids:
                # A task that is gone (purged) is reported past any version, so its
                # streams read it once more, find it missing and stop waiting for it.
                version = versions.get(task_id, GONE)
                for queue in self.queues.get(f"task.{task_id}", ()):
                    queue.put_nowait({"task_id": task_id, "version": version, "catch_up": True})

    async def fresh(
        self, key: tuple[Any, ...], since: float, read: Callable[[], Awaitable[Any]]
    ) -> Any:
        """Share a read among callers that need data no older than ``since``: join a read
        that started at or after it, else start one. A burst of new streams costs a few
        reads, not one each."""
        entry = self.latest.get(key)
        if entry is None or entry[0] < since:
            entry = (time.monotonic(), asyncio.ensure_future(read()))
            self.latest[key] = entry
            if len(self.latest) > 10_000:
                self.latest.clear()
                self.latest[key] = entry
        return await asyncio.shield(entry[1])

    async def shared(self, key: tuple[Any, ...], read: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``read`` once for every caller with the same key within a short window."""
        now = time.monotonic()
        for stale in [k for k, (at, _) in self.reads.items() if now - at > SHARED_READ_TTL_S]:
            del self.reads[stale]
        entry = self.reads.get(key)
        if entry is None:
            future: asyncio.Future[Any] = asyncio.ensure_future(read())
            self.reads[key] = (now, future)
        else:
            future = entry[1]
        return await asyncio.shield(future)


def _versions(task_ids: list[str]) -> dict[str, int]:
    from django.db import close_old_connections

    from mcptasks.models import Task

    try:
        return dict(Task.objects.filter(pk__in=task_ids).values_list("pk", "version"))
    finally:
        close_old_connections()


_hubs: dict[asyncio.AbstractEventLoop, Hub] = {}


def hub() -> Hub:
    loop = asyncio.get_running_loop()
    found = _hubs.get(loop)
    if found is None:
        for closed in [old for old in _hubs if old.is_closed()]:
            del _hubs[closed]
        found = _hubs[loop] = Hub(loop)
    return found
