"""A thread with its own database connection, for the audit tests that need two writers."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connection


def in_thread(target: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Start ``target`` in a daemon thread; its ``result`` or ``error`` lands in the dict. The
    thread closes its own connection when done."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = target()
        except Exception as exc:
            outcome["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome
