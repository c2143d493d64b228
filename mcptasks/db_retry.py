"""Transient database failures (a terminated backend, a dropped connection): retried on a fresh
connection where that is safe, reported as an unknown outcome where it is not.

Safe: reads, and writes whose repetition changes nothing (recording cancel intent twice is a
no-op). Anything else may have committed before the connection broke, so it is not repeated:
the caller is told its outcome is unknown (a ``tools/call`` retried with the same idempotency key
returns the task it may have created, never a second one).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection

log = logging.getLogger(__name__)

TRANSIENT = (OperationalError, InterfaceError)


def run[T](fn: Callable[[], T], *, safe: bool, what: str) -> T:
    """Call ``fn``; on a transient database error drop the connection (the next query opens a
    fresh one) and, if ``safe``, call it again, up to MCPTASKS_DB_RETRIES times."""
    retries = settings.MCPTASKS_DB_RETRIES if safe else 0
    for attempt in range(retries + 1):
        try:
            return fn()
        except TRANSIENT:
            if connection.in_atomic_block:
                raise  # inside a caller's transaction: that caller decides
            connection.close()
            if attempt == retries:
                raise
            log.warning("database error; retrying %s on a fresh connection", what, exc_info=True)
            time.sleep(0.05 * 2**attempt)
    raise AssertionError("unreachable")
