"""Structured logs (structlog) for every stdlib logger, through the audit redactor."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import unquote_plus

import structlog

from audit.redact import REDACTED, is_sensitive_key, redact, redact_text

access_log = logging.getLogger("mcptasks.access")


def _redact_event(logger: Any, method: str, event: Any) -> Any:
    """Pass the message, every field and the formatted traceback through the one redactor."""
    cleaned = redact(event, max_bytes=65_536)
    if isinstance(cleaned, dict) and "event" in cleaned:
        return cleaned
    return {"event": redact_text(str(event.get("event", ""))), "truncated": True}


def _request_context(logger: Any, method: str, event: Any) -> Any:
    from audit.record import current_request_id

    request_id = current_request_id.get()
    if request_id:
        event.setdefault("request_id", request_id)
        # A task's correlation id is the id of the request that created it (failures.py);
        # workers bind the task's own.
        event.setdefault("correlation_id", request_id)
    return event


def _record_extras(logger: Any, method: str, event: Any) -> Any:
    """Fields passed with ``extra={...}`` on stdlib calls."""
    record = event.get("_record")
    if record is not None:
        skip = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}
        for key, value in record.__dict__.items():
            if key not in skip and not key.startswith("_"):
                event.setdefault(key, value)
    return event


def formatter(fmt: str = "console") -> structlog.stdlib.ProcessorFormatter:
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _request_context,
    ]
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            _record_extras,
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            _redact_event,
            renderer,
        ],
    )


def redact_request_target(target: str) -> str:
    """A request line's path and query as an access log may keep it: the value of every query
    parameter with a sensitive name (``?access_token=``, ``&sig=``, ``api%5Fkey``) replaced, and
    the rest through :func:`redact_text` (a JWT or card number under a harmless name)."""
    path, mark, query = target.partition("?")
    if mark:
        pairs = []
        for pair in query.split("&"):
            name, equals, value = pair.partition("=")
            if equals and value and is_sensitive_key(unquote_plus(name)):
                value = REDACTED
            pairs.append(f"{name}{equals}{value}")
        target = f"{path}?{'&'.join(pairs)}"
    return redact_text(target)


class AccessLog:
    """Daphne's access log (its ``action_logger``), written through ``mcptasks.access`` — so the
    structlog pipeline and the redactor — with secrets in the query string removed first."""

    def __call__(self, protocol: str, action: str, details: dict[str, Any]) -> None:
        if protocol == "http" and action == "complete":
            access_log.info(
                "%s %s %s",
                details.get("method"),
                redact_request_target(str(details.get("path", ""))),
                details.get("status"),
                extra={
                    "client": details.get("client"),
                    "status": details.get("status"),
                    "bytes": details.get("size"),
                    "duration_ms": round(float(details.get("time_taken") or 0) * 1000, 1),
                },
            )
        elif protocol == "websocket" and action in ("connecting", "rejected", "disconnected"):
            access_log.info(
                "WS%s %s",
                action.upper(),
                redact_request_target(str(details.get("path", ""))),
                extra={"client": details.get("client")},
            )


class QueryStringSecrets(logging.Filter):
    """uvicorn's access log (logger ``uvicorn.access``, args: client, method, path with query,
    HTTP version, status) with query-string secrets redacted, as :class:`AccessLog` does for
    Daphne — whatever handler and format uvicorn was configured with."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], redact_request_target(args[2]), *args[3:])
        return True


def guard_access_logs() -> None:
    """Attach :class:`QueryStringSecrets` to ``uvicorn.access`` (once; a later ``dictConfig``
    replaces a logger's handlers but keeps its filters)."""
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, QueryStringSecrets) for f in access.filters):
        access.addFilter(QueryStringSecrets())
