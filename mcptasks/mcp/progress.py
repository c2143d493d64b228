"""``notifications/progress`` for an inline ``tools/call`` (PROTOCOL §3.6).

A ``tools/call`` whose ``_meta`` carries a ``progressToken`` and whose client accepts
``text/event-stream`` gets its progress live: the tool's ``ctx.report(..., progress=…)`` calls,
made on the handler's pool thread, queue notifications here. The response stays plain JSON unless
a notification is ready before the result; then it becomes an SSE stream: every notification in
order, then the JSON-RPC response, then the end of the body. Progress belongs to the open request
only: a task's progress is its ``statusMessage`` (``tasks/get``), never a notification.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from mcptasks.mcp.listen import sse, sse_start
from mcptasks.protocol.call import Call
from mcptasks.protocol.errors import invalid_params

PROGRESS_TOKEN = "progressToken"


def progress_token(call: Call) -> str | int | None:
    """The request's ``_meta.progressToken`` (a string or an integer), or None."""
    token = call.params["_meta"].get(PROGRESS_TOKEN)
    if token is None:
        return None
    if isinstance(token, bool) or not isinstance(token, str | int):
        raise invalid_params(f"_meta.{PROGRESS_TOKEN} must be a string or an integer")
    return token


class ProgressStream:
    """The progress notifications of one open request, and the SSE response that carries them."""

    def __init__(self, request_id: str | int | None, token: str | int) -> None:
        self.request_id = request_id
        self.token = token
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.last: float | None = None
        self.lock = threading.Lock()
        self.work: asyncio.Future[Any] | None = None
        self.first: dict[str, Any] | None = None

    @classmethod
    def open(cls, call: Call, headers: dict[str, str]) -> ProgressStream | None:
        """A stream for ``call`` when it asked for progress and can read SSE (else None); sets
        ``call.progress`` so that the tool's reports reach it."""
        if call.method != "tools/call":
            return None
        token = progress_token(call)
        if token is None or "text/event-stream" not in headers.get("accept", "").lower():
            return None
        stream = cls(call.id, token)
        call.progress = stream.notify
        return stream

    def notify(self, message: str, progress: float, total: float | None) -> None:
        """Queue one notification (called on the handler's thread). The progress value MUST
        increase with each notification: a report that does not advance it sends nothing."""
        with self.lock:
            if self.last is not None and progress <= self.last:
                return
            self.last = progress
        params: dict[str, Any] = {"progressToken": self.token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message:
            params["message"] = message
        notification = {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}
        self.loop.call_soon_threadsafe(self.queue.put_nowait, notification)

    async def _next(self, work: asyncio.Future[Any]) -> dict[str, Any] | None:
        """The next notification, or None once ``work`` is done and none is left before it."""
        if not self.queue.empty():
            return self.queue.get_nowait()
        getter = asyncio.ensure_future(self.queue.get())
        await asyncio.wait({work, getter}, return_when=asyncio.FIRST_COMPLETED)
        if getter.done():
            return getter.result()
        getter.cancel()
        # Notifications are queued before the handler returns: any left come first.
        return self.queue.get_nowait() if not self.queue.empty() else None

    async def streams(self, work: asyncio.Future[Any]) -> bool:
        """Wait until ``work`` (the handler) is done or a notification is ready: True when the
        response must be a stream (a notification came first)."""
        self.work = work
        self.first = await self._next(work)
        return self.first is not None

    async def run(
        self,
        send: Any,
        final: Callable[[str | int | None, asyncio.Future[Any]], dict[str, Any]],
        headers: list[tuple[bytes, bytes]],
    ) -> None:
        """Send the SSE response: the notifications, then ``final(request id, work)`` (the
        JSON-RPC response of the finished handler), then the end."""
        work = self.work
        assert work is not None
        # A client gone mid-stream leaves the handler running; its outcome is still consumed.
        work.add_done_callback(lambda done: done.cancelled() or done.exception())
        try:
            await send(sse_start(headers))
            notification = self.first
            while notification is not None:
                await send(
                    {"type": "http.response.body", "body": sse(notification), "more_body": True}
                )
                notification = await self._next(work)
            await send({"type": "http.response.body", "body": sse(final(self.request_id, work))})
        except OSError:
            pass  # the client went away
