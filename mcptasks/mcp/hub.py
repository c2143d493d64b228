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

from mcptasks import access, events, wire
from mcptasks.models import TERMINAL_STATES, Task
from mcptasks.protocol.call import META_SUBSCRIPTION

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
                        wire.detailed_for(user, task, capabilities),
                    )
        return found
    finally:
        close_old_connections()


# (token pk or None for a JWT, user pk, tenant pk): whose rights a stream runs on.
PrincipalKey = tuple[int | None, int, int]


class Subscriber(Protocol):
    """What the hub needs of a stream (``listen.ListenStream``)."""

    viewer: ViewerKey
    user: Any
    capabilities: dict[str, Any]
    principal_key: PrincipalKey
    expires_at: Any  # a JWT's expiry (datetime), else None
    task_ids: list[str]

    def behind(self, task_id: str, version: int) -> bool: ...

    def offer(self, task_id: str, frame: Frame | None) -> None: ...

    def end(self) -> None: ...


def read_grants(keys: set[PrincipalKey]) -> dict[PrincipalKey, dict[int, set[str]] | None]:
    """For each principal: its user's roles by tenant now, or None when the principal has lost
    its access (token revoked or expired, user deactivated, no longer a member of the token's
    tenant). Three queries for every stream of the process."""
    from django.contrib.auth import get_user_model
    from django.db.models import Q
    from django.utils import timezone

    from mcptasks.models import ApiToken, Membership

    try:
        token_ids = {token for token, _, _ in keys if token is not None}
        user_ids = {user for _, user, _ in keys}
        now = timezone.now()
        live_tokens = set(
            ApiToken.objects.filter(pk__in=token_ids, revoked_at__isnull=True)
            .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
            .values_list("pk", flat=True)
        )
        live_users = set(
            get_user_model()
            ._default_manager.filter(pk__in=user_ids, is_active=True)
            .values_list("pk", flat=True)
        )
        roles: dict[int, dict[int, set[str]]] = {}
        for user_id, tenant_id, role in Membership.objects.filter(
            user_id__in=live_users
        ).values_list("user_id", "tenant_id", "role"):
            roles.setdefault(user_id, {}).setdefault(tenant_id, set()).add(role)
        grants: dict[PrincipalKey, dict[int, set[str]] | None] = {}
        for key in keys:
            token, user, tenant = key
            held = roles.get(user, {})
            lost = (token is not None and token not in live_tokens) or tenant not in held
            grants[key] = None if lost or user not in live_users else held
        return grants
    finally:
        close_old_connections()


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
        # Every open stream of this loop (with or without task ids), by principal.
        self.open: dict[PrincipalKey, set[Subscriber]] = {}
        self.guard: asyncio.Task[None] | None = None

    def admit(self, stream: Subscriber, limit: int) -> bool:
        """Count an opening stream of its principal; False (nothing counted) past ``limit``."""
        streams = self.open.setdefault(stream.principal_key, set())
        if len(streams) >= limit:
            if not streams:
                del self.open[stream.principal_key]
            return False
        streams.add(stream)
        if self.guard is None or self.guard.done():
            self.guard = asyncio.create_task(self._guard())
        return True

    def release(self, stream: Subscriber) -> None:
        streams = self.open.get(stream.principal_key)
        if streams is not None:
            streams.discard(stream)
            if not streams:
                del self.open[stream.principal_key]

    async def _guard(self) -> None:
        """Access ends while a stream is open: every ``MCPTASKS_STREAM_ACCESS_CHECK_S`` read
        what each streaming principal holds now. A principal that lost its access (token
        revoked, user deactivated, membership of the token's tenant removed) has its streams
        ended, and so are streams opened with a JWT once it expires; one whose roles changed
        has them used from now on and its tasks re-read, so a task it may no longer see gets
        nothing more."""
        from django.conf import settings
        from django.utils import timezone

        while True:
            await asyncio.sleep(settings.MCPTASKS_STREAM_ACCESS_CHECK_S)
            now = timezone.now()
            for streams in list(self.open.values()):
                for stream in list(streams):
                    if stream.expires_at is not None and stream.expires_at <= now:
                        stream.end()  # its JWT expired
            if not self.open:
                continue
            try:
                grants = await sync_to_async(read_grants, thread_sensitive=False)(set(self.open))
            except Exception:
                log.warning("stream access check failed", exc_info=True)
                continue
            for key, held in grants.items():
                for stream in list(self.open.get(key, ())):
                    if held is None:
                        stream.end()
                    elif getattr(stream.user, "_mcptasks_roles", None) != held:
                        access.refresh(stream.user)
                        stream.user._mcptasks_roles = {t: set(r) for t, r in held.items()}
                        await self._reread(stream)

    async def _reread(self, stream: Subscriber) -> None:
        """Offer ``stream`` its tasks as its viewer sees them now (None: no longer visible)."""
        if not stream.task_ids:
            return
        viewer = {stream.viewer: (stream.user, stream.capabilities)}
        try:
            frames = await sync_to_async(read_frames, thread_sensitive=False)(
                list(stream.task_ids), viewer
            )
        except Exception:
            log.warning("stream access re-read failed", exc_info=True)
            return
        for task_id in list(stream.task_ids):
            stream.offer(task_id, frames[stream.viewer].get(task_id))

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
                        await self.layer.group_add(events.task_group_name(task_id), self.channel)
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
                        await self.layer.group_discard(
                            events.task_group_name(task_id), self.channel
                        )

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
