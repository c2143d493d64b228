"""The `/mcp` ASGI application: stateless 2026-07-28 Streamable HTTP (PROTOCOL §1, §8.2).

Validation runs in the project's order: Origin/Host → HTTP method and media types → size →
JSON parse and envelope → Mcp-Method / Mcp-Name → `_meta` → MCP-Protocol-Version → version →
authentication → method known → capability gating → params (in the handler). Handlers run on
a thread pool (``thread_sensitive=False``) so database access never funnels through one thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
from typing import Any

import structlog
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections

from audit.record import current_request_id
from mcptasks import db_retry, events, metrics, tracing
from mcptasks.auth import AuthError, Principal, authenticate_bearer
from mcptasks.limits import Throttled
from mcptasks.mcp import fast_get
from mcptasks.mcp.handlers import LISTEN, gate, server_info
from mcptasks.mcp.listen import ListenStream, parse_listen
from mcptasks.mcp.progress import ProgressStream
from mcptasks.oauth import resource_metadata_url
from mcptasks.protocol import headers as header_rules
from mcptasks.protocol import jsonrpc
from mcptasks.protocol.call import (
    META_CAPABILITIES,
    META_SERVER_INFO,
    META_VERSION,
    PROTOCOL_VERSION,
    SUPPORTED_VERSIONS,
    Call,
)
from mcptasks.protocol.errors import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    UNSUPPORTED_PROTOCOL_VERSION,
    McpError,
)

log = logging.getLogger(__name__)
# Methods a transient database error may repeat: reads, and cancel (recording intent twice is a
# no-op). tools/call and tasks/update may have committed: never repeated blindly.
REPEAT_SAFE = frozenset({"server/discover", "tools/list", "tasks/get", "tasks/cancel"})

LOCAL_ORIGIN = re.compile(r"^https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?$", re.IGNORECASE)


class ClientGone(Exception):
    """The client disconnected before its request was read: nothing is sent (T7)."""


class HttpError(Exception):
    """A transport-level refusal with a plain body (not a JSON-RPC error)."""

    def __init__(
        self, status: int, message: str, extra_headers: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.extra_headers = status, message, extra_headers or []


def _allowed_host(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
    allowed = settings.ALLOWED_HOSTS
    return "*" in allowed or name.lower() in {h.lower() for h in allowed}


def _allowed_origin(origin: str) -> bool:
    if LOCAL_ORIGIN.match(origin):
        return True
    return origin in settings.MCPTASKS_ALLOWED_ORIGINS


def refuse_earlier_era(message: jsonrpc.Message, headers: dict[str, str]) -> None:
    """Answer a request of an earlier protocol era (PROTOCOL §1.5) with the version-mismatch
    error the 2025 specifications define: ``-32602`` "Unsupported protocol version", with
    ``data.supported`` and ``data.requested`` (HTTP 400), so its client can tell its user why.

    Earlier-era: no ``_meta`` protocol version and either ``initialize`` (the 2025 handshake) or
    no ``Mcp-Method`` header (a 2025 session request). A 2026-07-28 request missing one marker
    gets the error of the marker it lacks instead.
    """
    meta = message.params.get("_meta")
    if isinstance(meta, dict) and META_VERSION in meta:
        return
    if message.method != "initialize" and "mcp-method" in headers:
        return
    requested = message.params.get("protocolVersion") if message.method == "initialize" else None
    if not isinstance(requested, str) or not requested.strip():
        requested = headers.get("mcp-protocol-version")
    data: dict[str, Any] = {"supported": list(SUPPORTED_VERSIONS)}
    asked = ""
    if requested and requested.strip():
        data["requested"] = requested.strip()[:100]
        asked = f" {data['requested']}"
    raise McpError(
        INVALID_PARAMS,
        f"Unsupported protocol version{asked}: this server speaks MCP {PROTOCOL_VERSION} only "
        "(stateless requests with _meta, no initialize handshake); "
        f"use a client that supports {PROTOCOL_VERSION}",
        data,
        http_status=400,
    )


class McpApplication:
    """ASGI callable for POST /mcp."""

    def __init__(self) -> None:
        # Authentication, gating and the handler in one hop to a pool thread; the wrapper is
        # made once (it holds no per-call state), not per request.
        self._serve_on_thread = sync_to_async(self._serve, thread_sensitive=False)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        request_id = secrets.token_hex(8)
        token = current_request_id.set(request_id)
        events.remember_loop(asyncio.get_running_loop())
        try:
            outcome = await self._respond(scope, receive)
        finally:
            current_request_id.reset(token)
        if outcome is None:
            return  # the client is gone: a disconnect cancels the request, nothing is sent
        if isinstance(outcome, ListenStream):
            await outcome.run(receive, send)
            return
        if isinstance(outcome, ProgressStream):
            await outcome.run(send, self._final_message, [(b"x-request-id", request_id.encode())])
            return
        status, body, extra = outcome
        response_headers = [(b"x-request-id", request_id.encode()), *extra]
        if body is None:
            await send(
                {"type": "http.response.start", "status": status, "headers": response_headers}
            )
            await send({"type": "http.response.body", "body": b""})
            return
        payload = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), *response_headers],
            }
        )
        await send({"type": "http.response.body", "body": payload})

    async def _respond(
        self, scope: dict[str, Any], receive: Any
    ) -> tuple[int, Any, list[tuple[bytes, bytes]]] | ListenStream | ProgressStream | None:
        headers = {
            k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])
        }
        try:
            self._check_transport(scope, headers)
            body = await self._read_body(receive, headers)
        except ClientGone:
            return None
        except HttpError as exc:
            return exc.status, {"error": exc.message}, exc.extra_headers
        request_id: str | int | None = None
        try:
            message = jsonrpc.parse(body)
            request_id = message.id
            if message.is_notification:
                # Accepted (and ignored) only from an authenticated client, like any request.
                await sync_to_async(self._authenticate, thread_sensitive=False)(
                    headers.get("authorization")
                )
                return 202, None, []
            call = self._envelope(message, headers)
            if message.method == LISTEN:
                principal = await sync_to_async(self._authenticate, thread_sensitive=False)(
                    headers.get("authorization")
                )
                gate(message.method, message.params, call.capabilities)
                call.principal = principal
                return ListenStream(call, parse_listen(call))
            result = None
            if message.method == "tasks/get" and fast_get.enabled():
                result = await fast_get.tasks_get(call, headers.get("authorization"))
            if result is None:
                serve = self._serve_on_thread
                progress = ProgressStream.open(call, headers)
                if progress is None:
                    result = await serve(call, headers.get("authorization"))
                else:
                    work = asyncio.ensure_future(serve(call, headers.get("authorization")))
                    if await progress.streams(work):
                        return progress  # a notification is ready: the reply is SSE
                    result = work.result()
        except Exception as exc:
            return self._failure(exc, request_id)
        return 200, self._success(request_id, result), []

    def _failure(
        self, exc: Exception, request_id: str | int | None
    ) -> tuple[int, Any, list[tuple[bytes, bytes]]]:
        """The HTTP status, body and headers that answer a request that raised ``exc``."""
        if isinstance(exc, Throttled):
            metrics.THROTTLED.labels(kind=exc.kind).inc()
            return (
                429,
                {"error": "too_many_requests", "error_description": exc.message},
                [(b"retry-after", str(exc.retry_after).encode())],
            )
        if isinstance(exc, AuthError):
            challenge = (
                f'Bearer realm="mcptasks", error="{exc.error}", '
                f'resource_metadata="{resource_metadata_url()}", '
                f'error_description="{exc.description}", scope="{exc.scope}"'
            )
            return (
                exc.status,
                {"error": exc.error, "error_description": exc.description},
                [(b"www-authenticate", challenge.encode())],
            )
        if isinstance(exc, McpError):
            rid = request_id if request_id is not None else getattr(exc, "request_id", None)
            return exc.http_status, jsonrpc.error_response(rid, exc), []
        log.error("unhandled error on /mcp", exc_info=exc)
        error = McpError(INTERNAL_ERROR, "Internal error")
        return 500 if request_id is None else 200, jsonrpc.error_response(request_id, error), []

    @staticmethod
    def _success(request_id: str | int | None, result: dict[str, Any]) -> dict[str, Any]:
        meta = result.setdefault("_meta", {})
        meta.setdefault(META_SERVER_INFO, server_info())
        return jsonrpc.result_response(request_id, result)

    def _final_message(
        self, request_id: str | int | None, work: asyncio.Future[Any]
    ) -> dict[str, Any]:
        """The JSON-RPC response that ends a progress stream (its HTTP status is already sent)."""
        exc = work.exception()
        if exc is None:
            return self._success(request_id, work.result())
        status, body, _ = self._failure(exc, request_id)  # type: ignore[arg-type]
        if isinstance(body, dict) and "jsonrpc" in body:
            return body
        # Refused after the stream opened (e.g. throttled): the body is still JSON-RPC.
        return jsonrpc.error_response(request_id, McpError(INTERNAL_ERROR, f"HTTP {status}"))

    # ------------------------------------------------------------ steps
    def _check_transport(self, scope: dict[str, Any], headers: dict[str, str]) -> None:
        origin = headers.get("origin")
        if origin is not None and not _allowed_origin(origin.strip()):
            raise HttpError(403, "Forbidden: Origin not allowed")
        host = headers.get("host", "")
        if not _allowed_host(host):
            raise HttpError(403, "Forbidden: Host not allowed")
        if scope["method"] != "POST":
            raise HttpError(
                405, "Method Not Allowed: the MCP endpoint accepts POST only", [(b"allow", b"POST")]
            )
        content_type = headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/json":
            raise HttpError(415, "Unsupported Media Type: send Content-Type: application/json")
        accept = headers.get("accept")
        if (
            accept is not None
            and accept.strip()
            and not any(
                kind in accept
                for kind in ("application/json", "text/event-stream", "*/*", "application/*")
            )
        ):
            raise HttpError(406, "Not Acceptable: accept application/json or text/event-stream")

    async def _read_body(self, receive: Any, headers: dict[str, str]) -> bytes:
        limit = settings.MCPTASKS_MAX_REQUEST_BYTES
        declared = headers.get("content-length")
        too_large = HttpError(
            413, f"Payload Too Large: the limit is {limit} bytes (MCPTASKS_MAX_REQUEST_BYTES)"
        )
        if declared is not None and declared.strip().isdigit() and int(declared) > limit:
            raise too_large
        chunks: list[bytes] = []
        size = 0
        while True:
            event = await receive()
            if event["type"] == "http.disconnect":
                raise ClientGone()
            chunk = event.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise too_large
            chunks.append(chunk)
            if not event.get("more_body"):
                return b"".join(chunks)

    def _envelope(self, message: jsonrpc.Message, headers: dict[str, str]) -> Call:
        refuse_earlier_era(message, headers)
        if header_rules.check_method_and_name(
            headers,
            message.method,
            message.params,
            strict_task_name=settings.MCPTASKS_STRICT_MCP_NAME,
        ):
            metrics.MISSING_MCP_NAME.inc()
        meta = message.params.get("_meta")
        if not isinstance(meta, dict):
            raise McpError(
                INVALID_PARAMS, "Invalid params: params._meta is required", http_status=400
            )
        version = meta.get(META_VERSION)
        capabilities = meta.get(META_CAPABILITIES)
        if not isinstance(version, str) or not version:
            raise McpError(
                INVALID_PARAMS,
                f"Invalid params: _meta[{META_VERSION!r}] is required",
                http_status=400,
            )
        if not isinstance(capabilities, dict):
            raise McpError(
                INVALID_PARAMS,
                f"Invalid params: _meta[{META_CAPABILITIES!r}] must be an object",
                http_status=400,
            )
        header_version = headers.get("mcp-protocol-version")
        if header_version is None:
            raise McpError(HEADER_MISMATCH, "Header mismatch: MCP-Protocol-Version is required")
        if header_rules.decode_value("MCP-Protocol-Version", header_version) != version:
            raise McpError(
                HEADER_MISMATCH, "Header mismatch: MCP-Protocol-Version does not match _meta"
            )
        if version not in SUPPORTED_VERSIONS:
            raise McpError(
                UNSUPPORTED_PROTOCOL_VERSION,
                "Unsupported protocol version",
                {"supported": list(SUPPORTED_VERSIONS), "requested": version},
            )
        return Call(
            id=message.id,
            method=message.method,
            params=message.params,
            capabilities=capabilities,
            protocol_version=version,
            principal=None,  # type: ignore[arg-type]  # set after authentication
            headers=headers,
        )

    def _authenticate(self, authorization: str | None) -> Principal:
        try:
            return authenticate_bearer(authorization)
        finally:
            close_old_connections()

    def _serve(self, call: Call, authorization: str | None) -> dict[str, Any]:
        """Serve the call, retried on a fresh connection after a transient database error when
        repeating it is safe (mcptasks/db_retry.py); otherwise its outcome is unknown."""
        safe = call.method in REPEAT_SAFE
        try:
            with tracing.request_span(call.method, call.params, call.headers) as span:
                result = db_retry.run(
                    lambda: self._serve_once(call, authorization), safe=safe, what=call.method
                )
                tracing.note_result(span, result)
                return result
        except db_retry.TRANSIENT as exc:
            safe = db_retry.repeat_safe(exc)  # idempotent, or nothing was written
            log.warning("database error on /mcp %s", call.method, exc_info=True)
            raise McpError(
                INTERNAL_ERROR,
                "The database failed while this request ran"
                + (
                    "; nothing was changed, retry it"
                    if safe
                    else "; whether it took effect is unknown. A tools/call retried with the "
                    "same dev.mcptasks/idempotencyKey returns the task it may have created"
                ),
                {"outcome": "unknown", "retrySafe": safe},
            ) from None

    def _serve_once(self, call: Call, authorization: str | None) -> dict[str, Any]:
        """Authenticate (before anything else may run), gate, then run the method handler."""
        try:
            principal = authenticate_bearer(authorization)
            handler = gate(call.method, call.params, call.capabilities)
            assert handler is not None  # subscriptions/listen never comes here
            call.principal = principal
            with structlog.contextvars.bound_contextvars(
                tenant=principal.tenant.slug, principal=principal.user.get_username()
            ):
                return handler(call)
        finally:
            close_old_connections()
