"""The embedded default's in-process worker and beat (DESIGN §9).

`manage.py serve` starts them (never AppConfig.ready). Jobs are the same functions Celery runs in
production (mcptasks.jobs); this module only replaces the broker with an in-memory heap.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from datetime import datetime
from typing import Any

from django.db import close_old_connections

from mcptasks import jobs

log = logging.getLogger(__name__)

_heap: list[tuple[float, int, str, dict[str, Any]]] = []
_counter = itertools.count()
_cond = threading.Condition()
_stop = threading.Event()
_threads: list[threading.Thread] = []
_declined = threading.Event()
_start_lock = threading.Lock()


def submit(job: str, kwargs: dict[str, Any], eta: datetime | None = None) -> None:
    due = eta.timestamp() if eta is not None else time.time()
    with _cond:
        heapq.heappush(_heap, (due, next(_counter), job, kwargs))
        _cond.notify()


def pending() -> int:
    with _cond:
        return len(_heap)


def clear() -> None:
    with _cond:
        _heap.clear()


def _run(job: str, kwargs: dict[str, Any]) -> None:
    try:
        getattr(jobs, job).run(**kwargs)
    except Exception:
        log.exception("embedded job failed", extra={"job": job})
    finally:
        close_old_connections()


def _take(block: bool) -> tuple[str, dict[str, Any]] | None:
    with _cond:
        while not _stop.is_set():
            now = time.time()
            if _heap and _heap[0][0] <= now:
                _, _, job, kwargs = heapq.heappop(_heap)
                return job, kwargs
            if not block:
                return None
            _cond.wait(timeout=min(1.0, _heap[0][0] - now) if _heap else 1.0)
    return None


def drain(max_jobs: int = 10_000) -> int:
    """Run every job that is due, in this thread (tests and one-off commands); return count."""
    done = 0
    while done < max_jobs and (item := _take(block=False)) is not None:
        _run(*item)
        done += 1
    return done


def _worker_loop() -> None:
    while not _stop.is_set():
        item = _take(block=True)
        if item is not None:
            _run(*item)


RETENTION_INTERVAL_S = 86_400.0


def _beat_loop(interval: float) -> None:
    from django.conf import settings

    last_retention = last_digest = time.monotonic()
    while not _stop.wait(interval):
        submit("sweep", {})
        if time.monotonic() - last_retention >= RETENTION_INTERVAL_S:
            last_retention = time.monotonic()
            submit("purge_audit_due", {})
        if time.monotonic() - last_digest >= settings.MCPTASKS_AUDIT_DIGEST_INTERVAL_S:
            last_digest = time.monotonic()
            submit("write_audit_digests", {})


def decline() -> None:
    """This process runs no in-process worker (``serve --no-worker``, the test suite, which runs
    jobs with :func:`drain`): :func:`ensure_started` does nothing from now on."""
    _declined.set()


def ensure_started(workers: int = 2) -> bool:
    """Start the worker and beat unless declined or already running; True if it started them.

    The ASGI application calls this on the embedded default (lifespan startup, else its first
    request), so a server started without ``manage.py serve`` (``uvicorn mcptasks.asgi:
    application``, ``daphne``) still runs the tasks it creates.
    """
    if _declined.is_set() or _threads:
        return False
    with _start_lock:
        if _threads:
            return False
        start(workers=workers)
    log.warning(
        "embedded default: this web process runs the in-process worker (%d threads) and beat; "
        "with DATABASE_URL and REDIS_URL set, run `celery -A mcptasks worker` and "
        "`celery -A mcptasks beat` instead",
        workers,
    )
    return True


def start(workers: int = 2, beat_interval: float = 1.0) -> None:
    """Start worker threads and the beat thread (idempotent)."""
    if _threads:
        return
    _stop.clear()
    for number in range(workers):
        thread = threading.Thread(
            target=_worker_loop, name=f"mcptasks-worker-{number}", daemon=True
        )
        thread.start()
        _threads.append(thread)
    beat = threading.Thread(
        target=_beat_loop, args=(beat_interval,), name="mcptasks-beat", daemon=True
    )
    beat.start()
    _threads.append(beat)
    submit("sweep", {})


def stop() -> None:
    _stop.set()
    with _cond:
        _cond.notify_all()
    for thread in _threads:
        thread.join(timeout=5)
    _threads.clear()
