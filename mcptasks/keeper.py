"""Each Celery worker's keeper thread: a heartbeat, and the sweeps when beat's are late.

Beat sends the sweeps through the broker; while Redis is down nothing arrives, and leases,
timers and expiries would not be swept. Every worker's keeper therefore looks, once per sweep
interval, at when a sweep last ran (the ``sweep`` heartbeat row, written by
:func:`sweeps.run_all`) and runs them itself when they are late. Sweeps are safe to run in
several processes at once (sweeps.py), so no election is needed. The same thread writes the
worker's heartbeat (the operations page reads both).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from mcptasks import sweeps
from mcptasks.heartbeats import SWEEP, beat
from mcptasks.models import Heartbeat

log = logging.getLogger(__name__)


def sweep_late_after_s() -> float:
    """How old the last sweep may be before a worker runs them itself."""
    return max(3 * settings.MCPTASKS_SWEEP_INTERVAL_S, 3.0)


def sweeps_late() -> bool:
    last = Heartbeat.objects.filter(name=SWEEP).values_list("seen_at", flat=True).first()
    return last is None or timezone.now() - last > timedelta(seconds=sweep_late_after_s())


def tick(worker: str, concurrency: int) -> bool:
    """One round of the keeper; returns whether it ran the sweeps."""
    beat(f"worker:{worker}", pid=os.getpid(), concurrency=concurrency)
    if not sweeps_late():
        return False
    log.warning("sweeps are late (beat cannot reach the broker?); running them in this worker")
    sweeps.run_all()
    return True


def start(worker: str | None = None, concurrency: int = 0) -> threading.Thread:
    name = worker or socket.gethostname()

    def loop() -> None:
        while True:
            try:
                tick(name, concurrency)
            except Exception:
                log.warning("worker keeper round failed", exc_info=True)
            close_old_connections()
            time.sleep(max(settings.MCPTASKS_SWEEP_INTERVAL_S, 0.5))

    thread = threading.Thread(target=loop, daemon=True, name="mcptasks-keeper")
    thread.start()
    return thread
