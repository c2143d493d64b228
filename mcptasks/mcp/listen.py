"""``subscriptions/listen``: an SSE stream of ``notifications/tasks`` (PROTOCOL §2.6, §4.7).

After the acknowledgement the stream sends each acknowledged task's current state, then a new
state whenever a broadcast ``(task id, version)`` is ahead of what it sent; the process's hub
(hub.py) reads and renders each change once per viewer and writes it to the streams. The
channel layer delivers at most once, so the hub also re-reads the versions of subscribed tasks
every ``MCPTASKS_STREAM_CATCH_UP_S`` seconds; a terminal state is therefore always delivered.
Once every task is terminal and delivered the stream ends with the closing result.

The server also ends a stream (with the same closing result) when its principal loses access —
the hub re-checks every ``MCPTASKS_STREAM_ACCESS_CHECK_S`` — and when no notification was sent
for ``MCPTASKS_STREAM_IDLE_TIMEOUT_S``. A principal holds at most
``MCPTASKS_MAX_LISTEN_STREAMS_PER_PRINCIPAL`` open streams per web process; one more is
refused with 429.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections

from mcptasks import access, events, metrics
from mcptasks.mcp.hub import Frame, Hub, PrincipalKey, hub, read_frames, viewer_key
from mcptasks.protocol.call import META_SUBSCRIPTION, Call
from mcptasks.protocol.errors import invalid_params

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


async def _too_many_streams(send: Any, limit: int) -> None:
    metrics.THROTTLED.labels(kind="listen_streams").inc()
    body = json.dumps(
        {
            "error": "too_many_requests",
            "error_description": f"At most {limit} open subscriptions/listen streams per "
            "principal (MCPTASKS_MAX_LISTEN_STREAMS_PER_PRINCIPAL); close one first",
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 429,
            "headers": [(b"content-type", b"application/json"), (b"retry-after", b"5")],
        }
    )
    await send({"type": "http.response.body", "body": body})


def sse(message: dict[str, Any]) -> bytes:
    return (
        b"data: "
        + json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
        + b"\n\n"
    )


def sse_start(headers: list[tuple[bytes, bytes]] | None = None) -> dict[str, Any]:
    """The ASGI start of an SSE response (never buffered by a proxy)."""
    return {
        "type": "http.response.start",
        "status": 200,
        "headers": [
            (b"content-type", b"text/event-stream"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
            *(headers or []),
        ],
    }


class Writer:
    """Writes one stream's SSE bytes in order, callable from any task on the loop.

    A write to an idle stream runs the ASGI ``send`` eagerly, in the caller's turn (an eager
    task): the hub writes one frame to thousands of streams without switching task per stream.
    Only when a send has to wait (the client reads slowly) does it continue as a task, and the
    stream's later writes queue behind it; other streams are not held up.
    """

    def __init__(self, send: Any, failed: asyncio.Future[None]) -> None:
        self.send = send
        self.failed = failed  # set when a write fails (the stream's own "finished" future)
        self.loop = asyncio.get_running_loop()
        self.pending: deque[dict[str, Any]] = deque()
        self.busy: asyncio.Task[Any] | None = None
        self.closed = False  # the last body was written, or a write failed
        self.last_write = time.monotonic()

    def write(self, body: bytes, *, last: bool = False) -> None:
        if self.closed:
            return
        self.closed = last
        self.last_write = time.monotonic()
        message = {"type": "http.response.body", "body": body, "more_body": not last}
        if self.busy is None:
            self._start(message)
        else:
            self.pending.append(message)

    def _start(self, message: dict[str, Any]) -> None:
        while True:
            sending = asyncio.eager_task_factory(self.loop, self.send(message))
            if not sending.done():
                self.busy = sending
                sending.add_done_callback(self._sent)
                return
            if not self._succeeded(sending) or not self.pending:
                return
            message = self.pending.popleft()

    def _sent(self, sending: asyncio.Task[Any]) -> None:
        self.busy = None
        if self._succeeded(sending) and self.pending:
            self._start(self.pending.popleft())

    def _succeeded(self, sending: asyncio.Task[Any]) -> bool:
        if not sending.cancelled() and sending.exception() is None:
            return True
        self.closed = True
        self.pending.clear()
        if not self.failed.done():
            self.failed.set_result(None)
        return False

    async def drain(self) -> None:
        """Until every write so far has been handed to the server."""
        while self.busy is not None:
            await asyncio.wait({self.busy})


class ListenStream:
    """One ``subscriptions/listen`` response, alive as long as the client keeps it open."""

    def __init__(self, call: Call, task_ids: list[str] | None) -> None:
        self.call = call
        self.requested = task_ids
        self.user = call.principal.user
        self.capabilities = call.capabilities
        self.viewer = viewer_key(self.user, self.capabilities)
        principal = call.principal
        self.principal_key: PrincipalKey = (principal.token_id, self.user.pk, principal.tenant.pk)
        self.expires_at = principal.expires_at
        self.last_notice = time.monotonic()
        self.subscription = json.dumps(call.id, ensure_ascii=False).encode()
        self.task_ids: list[str] = []
        self.sent_versions: dict[str, int] = {}
        self.done: set[str] = set()
        self.writer: Writer | None = None
        self.finished: asyncio.Future[None] | None = None

    def _meta(self) -> dict[str, Any]:
        return {META_SUBSCRIPTION: self.call.id}

    def behind(self, task_id: str, version: int) -> bool:
        return task_id not in self.done and self.sent_versions.get(task_id, 0) < version

    def offer(self, task_id: str, frame: Frame | None) -> None:
        """Write ``frame`` (``task_id`` as this stream's viewer sees it; None when gone or no
        longer visible) if it is newer than what was sent; close once every task is done."""
        writer = self.writer
        if writer is None or writer.closed or task_id in self.done:
            return
        if frame is None:
            self.done.add(task_id)  # purged or no longer visible: nothing more to send
        elif frame.version > self.sent_versions.get(task_id, 0):
            self.sent_versions[task_id] = frame.version
            writer.write(frame.head + self.subscription + frame.tail)
            self.last_notice = time.monotonic()
            if frame.terminal:
                self.done.add(task_id)
        else:
            return
        if self.task_ids and len(self.done) >= len(self.task_ids):
            self.end()

    def end(self) -> None:
        """End the stream the graceful way (PROTOCOL §2.6): the closing result, then close."""
        writer = self.writer
        if writer is None or writer.closed:
            self._finish()
            return
        writer.write(
            sse(
                {
                    "jsonrpc": "2.0",
                    "id": self.call.id,
                    "result": {"resultType": "complete", "_meta": self._meta()},
                }
            ),
            last=True,
        )
        self._finish()

    def _finish(self) -> None:
        if self.finished is not None and not self.finished.done():
            self.finished.set_result(None)

    async def run(self, receive: Any, send: Any) -> None:
        local = hub()
        limit = settings.MCPTASKS_MAX_LISTEN_STREAMS_PER_PRINCIPAL
        if not local.admit(self, limit):
            await _too_many_streams(send, limit)
            return
        try:
            await self._run(local, receive, send)
        finally:
            local.release(self)

    async def _run(self, local: Hub, receive: Any, send: Any) -> None:
        global open_streams
        user = self.user
        opened = time.monotonic()
        acked = None
        if self.requested is not None:
            requested = self.requested
            acked = await local.fresh(
                ("visible", user.pk, tuple(requested)),
                opened,
                lambda: sync_to_async(_visible_ids, thread_sensitive=False)(user, requested),
            )
        await send(sse_start())
        agreed: dict[str, Any] = {} if acked is None else {"taskIds": acked}
        self.finished = asyncio.get_running_loop().create_future()
        self.writer = writer = Writer(send, self.finished)
        writer.write(
            sse(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/subscriptions/acknowledged",
                    "params": {"_meta": self._meta(), "notifications": agreed},
                }
            )
        )
        self.task_ids = acked or []
        open_streams += 1
        metrics.LISTEN_STREAMS.inc()
        events.remember_loop(asyncio.get_running_loop())
        disconnected = asyncio.ensure_future(self._until_disconnect(receive))
        try:
            await local.subscribe(self.task_ids, self)
            await self._current_state(local)
            await self._wait(disconnected)
            if not disconnected.done():
                await writer.drain()
        except (asyncio.CancelledError, OSError):
            pass
        finally:
            open_streams -= 1
            metrics.LISTEN_STREAMS.dec()
            disconnected.cancel()
            self._finish()
            await local.unsubscribe(self.task_ids, self)

    async def _current_state(self, local: Hub) -> None:
        """Each task's current state, read after the stream subscribed (so no change falls
        between), shared with the streams of this viewer that open at the same time."""
        if not self.task_ids:
            return
        since = time.monotonic()
        task_ids, viewer = self.task_ids, {self.viewer: (self.user, self.capabilities)}
        frames = await local.fresh(
            ("frames", self.viewer, tuple(task_ids)),
            since,
            lambda: sync_to_async(read_frames, thread_sensitive=False)(task_ids, viewer),
        )
        for task_id in task_ids:
            self.offer(task_id, frames[self.viewer].get(task_id))

    @staticmethod
    async def _until_disconnect(receive: Any) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    async def _wait(self, disconnected: asyncio.Future[None]) -> None:
        """Until the stream is finished or the client leaves; a keep-alive comment whenever
        nothing was written for ``MCPTASKS_STREAM_KEEPALIVE_S``; the end once no notification
        was sent for ``MCPTASKS_STREAM_IDLE_TIMEOUT_S`` (0: never). The hub writes the
        notifications: this task does not wake for them."""
        assert self.writer is not None and self.finished is not None
        keepalive_s = settings.MCPTASKS_STREAM_KEEPALIVE_S
        idle_timeout_s = settings.MCPTASKS_STREAM_IDLE_TIMEOUT_S
        while not self.finished.done() and not disconnected.done():
            now = time.monotonic()
            quiet = now - self.last_notice
            if idle_timeout_s > 0 and quiet >= idle_timeout_s:
                self.end()
                continue
            idle = now - self.writer.last_write
            if idle >= keepalive_s:
                self.writer.write(b": keep-alive\n\n")
                continue
            timeout = keepalive_s - idle
            if idle_timeout_s > 0:
                timeout = min(timeout, idle_timeout_s - quiet)
            await asyncio.wait(
                {disconnected, self.finished},
                timeout=timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
