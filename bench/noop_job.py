"""B6's floor: a no-op Celery job, for Celery's raw drain rate (bench/end_to_end.py).

Not a production job: only the benchmark's workers load it (``celery -A mcptasks worker
--include bench.noop_job``)."""

from __future__ import annotations

import functools
from typing import Any

from mcptasks.celery import app

NOOP_COUNTER = "mcptasks:bench:noop"


@functools.cache
def _counter() -> Any:
    import redis
    from django.conf import settings

    return redis.Redis.from_url(settings.CELERY_BROKER_URL)


@app.task(name="bench.noop")
def bench_noop() -> None:
    """A no-op job that only counts itself, on a client kept for the process: a connection per
    job would slow the floor down and flatter the ratio measured against it."""
    _counter().incr(NOOP_COUNTER)
