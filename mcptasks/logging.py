"""Structured logs (structlog) for every stdlib logger, through the audit redactor."""

from __future__ import annotations

import logging
from typing import Any

import structlog

from audit.redact import redact, redact_text


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
