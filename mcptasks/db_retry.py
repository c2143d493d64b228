"""Transient database failures (a terminated backend, a dropped connection): retried on a fresh
connection where that is safe, reported as an unknown outcome where it is not.

Safe: reads, and writes whose repetition changes nothing (recording cancel intent twice is a
no-op). Any other call is repeated only when its outcome is known: the connection broke before
the call had sent a single statement that writes (the common case: a backend terminated while
idle in the pool fails the request's first query, the token lookup). Once a write was sent it
may have committed before the connection broke, so it is not repeated: the caller is told its
outcome is unknown (a ``tools/call`` retried with the same idempotency key returns the task it
may have created, never a second one).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection

log = logging.getLogger(__name__)

TRANSIENT = (OperationalError, InterfaceError)


# Statements that write nothing: a failure after only these leaves nothing applied.
READ_ONLY_PREFIXES = ("select", "savepoint", "release", "rollback", "set ", "show")


# Set while statements run whose repetition is harmless (:func:`repeatable`).
_REPEATABLE: ContextVar[bool] = ContextVar("db_retry_repeatable", default=False)
_MODIFYING = re.compile(r"\b(insert|update|delete|merge)\b")


@contextmanager
def repeatable() -> Iterator[None]:
    """Writes inside this block may run twice without harm (a token's last-use time): they do
    not make the call that sent them unsafe to repeat."""
    reset = _REPEATABLE.set(True)
    try:
        yield
    finally:
        _REPEATABLE.reset(reset)


class WriteWatch:
    """An execute wrapper that notes whether any statement that may write was sent."""

    def __init__(self) -> None:
        self.wrote = False

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if not _REPEATABLE.get() and may_write(sql):
            self.wrote = True
        return execute(sql, params, many, context)


def may_write(sql: str) -> bool:
    """Could this statement change a row? (A ``WITH`` holding a data-modifying word counts.)"""
    head = " ".join(sql[:24].lower().split())  # the verb is all a plain statement needs
    if head.startswith("with "):
        return _MODIFYING.search(sql.lower()) is not None
    return not head.startswith(READ_ONLY_PREFIXES)


def run[T](fn: Callable[[], T], *, safe: bool, what: str) -> T:
    """Call ``fn``; on a transient database error drop the connection (the next query opens a
    fresh one) and call it again, up to MCPTASKS_DB_RETRIES times, if it is ``safe`` or sent no
    statement that writes (its outcome is known: nothing was applied)."""
    retries = settings.MCPTASKS_DB_RETRIES
    for attempt in range(retries + 1):
        watch = WriteWatch()
        try:
            with connection.execute_wrapper(watch):
                return fn()
        except TRANSIENT as exc:
            if connection.in_atomic_block:
                raise  # inside a caller's transaction: that caller decides
            connection.close()
            repeatable = safe or not watch.wrote
            setattr(exc, "repeat_safe", repeatable)  # noqa: B010 (read by repeat_safe below)
            if attempt == retries or not repeatable:
                raise
            log.warning("database error; retrying %s on a fresh connection", what, exc_info=True)
            time.sleep(0.05 * 2**attempt)
    raise AssertionError("unreachable")


def repeat_safe(exc: BaseException) -> bool:
    """Did the call that raised ``exc`` (through :func:`run`) leave nothing applied, so that
    repeating it is safe? False when it may have written."""
    return bool(getattr(exc, "repeat_safe", False))
