"""One channel-layer subscription per process, fanned out to the listen streams of that process.

A stream registers its task ids here instead of on the channel layer: the hub holds one layer
channel per event loop, joins each group ``task.<id>`` once (while it has local streams), and
handles every ``(task id, version)`` it receives once for the whole process.

Fan-out costs one read per change, not one per stream: for a ``(task id, version)`` some stream
is behind on, the hub reads the task once on a worker thread and, for each *viewer* among its
streams, runs that viewer's access check and renders the ``notifications/tasks`` frame once. A
viewer is a user together with the capabilities its listen request declared: those two decide
what that request's ``tasks/get`` would show (access check, and which input requests surface),
so streams sharing both may share the frame bytes. The hub then hands the frame to every stream
of the viewer from its own task; a stream writes it at once (see ``listen.Writer``), so no task
wakes, no JSON is encoded and no database read happens per stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import close_old_connections
from redis.exceptions import TimeoutError as RedisTimeoutError

from mcptasks import access
from mcptasks.models import TERMINAL_STATES, Task
from mcptasks.protocol.call import META_SUBSCRIPTION
from mcptasks.protocol.tasks import detailed_for

log = logging.getLogger(__name__)
GONE = 2**62
FRESH_READS_KEPT = 256

# (user pk, capabilities as canonical JSON): streams with the same key see the same frame.
ViewerKey = tuple[Any, str]


def viewer_key(user: Any, capabilities: dict[str, Any]) -> ViewerKey:
    return (user.pk, json.dumps(capabilities, sort_keys=True, default=str))


@dataclass(frozen=True, slots=True)
class Frame:
    """A ``notifications/tasks`` SSE frame, rendered once for one viewer and version; the
    subscription id (each stream's own) goes between ``head`` and ``tail``."""

    version: int
    terminal: bool
    head: bytes
    tail: bytes


# The subscription id's place in a rendered frame: random, so no task content can mimic it.
_PLACEHOLDER = f"\ue000{secrets.token_hex(16)}\ue000"
_PLACEHOLDER_JSON = json.dumps(_PLACEHOLDER, ensure_ascii=False).encode()


def render_frame(version: int, terminal: bool, detailed: dict[str, Any]) -> Frame:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "method": "notifications/tasks",
            "params": {**detailed, "_meta": {META_SUBSCRIPTION: _PLACEHOLDER}},
        },
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()
    head, tail = body.rsplit(_PLACEHOLDER_JSON, 1)
    return Frame(version, terminal, b"data: " + head, tail + b"\n\n")


def read_frames(
    task_ids: list[str], viewers: dict[ViewerKey, tuple[Any, dict[str, Any]]]
) -> dict[ViewerKey, dict[str, Frame]]:
    """For each viewer ``(user, capabilities)``: ``{task id: Frame}`` of the tasks it may see,
    read through its access check with the input requests its capabilities can take — what
    its ``tasks/get`` shows. The task rows are read once for all viewers."""
    try:
        tasks = list(Task.objects.select_related("tenant").filter(pk__in=task_ids))
        found: dict[ViewerKey, dict[str, Frame]] = {}
        for key, (user, capabilities) in viewers.items():
            frames = found[key] = {}
            for task in tasks:
                if access.can(user, access.Action.VIEW, task):
                    frames[task.pk] = render_frame(
                        task.version,
                        task.state in TERMINAL_STATES,
                        detailed_for(user, task, capabilities),
                    )
        return found
    finally:
        close_old_connections()


class Subscriber(Protocol):
    """What the hub needs of a stream (``listen.ListenStream``)."""

    viewer: ViewerKey
    user: Any
    capabilities: dict[str, Any]

    def behind(self, task_id: str, version: int) -> bool: ...

    def offer(self, task_id: str, frame: Frame | None) -> None: ...


class Hub:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.layer = get_channel_layer()
        self.channel: str | None = None
        self.reader: asyncio.Task[None] | None = None
        self.catch_up: asyncio.Task[None] | None = None
        self.lock = asyncio.Lock()
        # task id → viewer → its streams
        self.streams: dict[str, dict[ViewerKey, set[Subscriber]]] = {}
        self.fanning: set[tuple[str, int]] = set()
        self.fan_outs: set[asyncio.Task[None]] = set()
        self.latest: dict[tuple[Any, ...], tuple[float, asyncio.Future[Any]]] = {}

    async def subscribe(self, task_ids: list[str], stream: Subscriber) -> None:
        async with self.lock:
            if self.catch_up is None or self.catch_up.done():
                self.catch_up = asyncio.create_task(self._catch_up())
            if self.layer is not None and self.channel is None:
                self.channel = await self.layer.new_channel()
                self.reader = asyncio.create_task(self._read())
            for task_id in task_ids:
                viewers = self.streams.get(task_id)
                if viewers is None:
                    viewers = self.streams[task_id] = {}
                    if self.layer is not None and self.channel is not None:
                        await self.layer.group_add(f"task.{task_id}", self.channel)
                viewers.setdefault(stream.viewer, set()).add(stream)

    async def unsubscribe(self, task_ids: list[str], stream: Subscriber) -> None:
        async with self.lock:
            for task_id in task_ids:
                viewers = self.streams.get(task_id)
                if viewers is None:
                    continue
                members = viewers.get(stream.viewer)
                if members is not None:
                    members.discard(stream)
                    if not members:
                        del viewers[stream.viewer]
                if viewers:
                    continue
                del self.streams[task_id]
                if self.layer is not None and self.channel is not None:
                    with contextlib.suppress(Exception):  # membership also expires on its own
                        await self.layer.group_discard(f"task.{task_id}", self.channel)

    async def _read(self) -> None:
        assert self.layer is not None and self.channel is not None
        while True:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except RedisTimeoutError:
                # redis-py's default socket timeout (5 s) is channels-redis's blocking-pop
                # time (5 s), so an idle receive can time out on our side. Messages wait in
                # Redis until popped: receive again at once, as a pause would delay them.
                log.debug("channel layer receive timed out while idle; receiving again")
                continue
            except Exception:
                log.warning("channel layer receive failed; retrying", exc_info=True)
                await asyncio.sleep(1)
                continue
            task_id, version = message.get("task_id"), message.get("version", 0)
            if isinstance(task_id, str) and isinstance(version, int):
                self.notify(task_id, version)

    def notify(self, task_id: str, version: int) -> None:
        """``task_id`` is at ``version``: if a stream here is behind, read it once and hand
        the new frame to every stream."""
        viewers = self.streams.get(task_id)
        if not viewers or (task_id, version) in self.fanning:
            return
        if not any(s.behind(task_id, version) for streams in viewers.values() for s in streams):
            return
        self.fanning.add((task_id, version))
        fan_out = asyncio.create_task(self._fan_out(task_id, version))
        self.fan_outs.add(fan_out)
        fan_out.add_done_callback(self.fan_outs.discard)

    async def _fan_out(self, task_id: str, version: int) -> None:
        try:
            viewers = {}
            for key, streams in self.streams.get(task_id, {}).items():
                stream = next(iter(streams))  # any one: they share user and capabilities
                viewers[key] = (stream.user, stream.capabilities)
            frames = await sync_to_async(read_frames, thread_sensitive=False)([task_id], viewers)
        except Exception:
            # The periodic catch-up reads it again.
            log.warning("stream fan-out read failed", exc_info=True, extra={"task_id": task_id})
            return
        finally:
            self.fanning.discard((task_id, version))
        for key, streams in list(self.streams.get(task_id, {}).items()):
            if key not in frames:
                continue  # joined during the read: its own first read is newer than this one
            frame = frames[key].get(task_id)
            for stream in list(streams):
                stream.offer(task_id, frame)

    async def _catch_up(self) -> None:
        """The channel layer delivers at most once: every few seconds read the versions of
        every subscribed task in one query and fan out what some stream is behind on."""
        from django.conf import settings

        while True:
            await asyncio.sleep(settings.MCPTASKS_STREAM_CATCH_UP_S)
            task_ids = list(self.streams)
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
                self.notify(task_id, versions.get(task_id, GONE))

    async def fresh(
        self, key: tuple[Any, ...], since: float, read: Callable[[], Awaitable[Any]]
    ) -> Any:
        """Share a read among callers that need data no older than ``since``: join a read
        that started at or after it, else start one. A burst of new streams costs a few
        reads, not one each."""
        entry = self.latest.get(key)
        if entry is None or entry[0] < since:
            entry = (time.monotonic(), asyncio.ensure_future(read()))
            if len(self.latest) >= FRESH_READS_KEPT:
                # Only reads started since a caller arrived are joined: old ones are useless.
                self.latest = {
                    k: v for k, v in self.latest.items() if not v[1].done() or v[0] >= since
                }
            self.latest[key] = entry
        return await asyncio.shield(entry[1])


def _versions(task_ids: list[str]) -> dict[str, int]:
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
