"""Job delivery: to the embedded default's in-process worker, or to Celery (DESIGN §9).

Registered as :mod:`mcptasks.events`' dispatcher when the app is ready (mcptasks/apps.py), so
that events — which every writer of task state imports — never imports the jobs.
"""

from __future__ import annotations

import functools
import logging
from datetime import datetime
from typing import Any

from django.conf import settings

from mcptasks import embedded, jobs
from mcptasks.publish import Publisher

log = logging.getLogger(__name__)


@functools.cache
def _publisher() -> Publisher:
    """The publisher of the project's Celery app (one LPUSH per job where Celery's publish
    would send the same message: mcptasks/publish.py)."""
    from mcptasks.celery import app

    return Publisher(app)


def deliver(job: str, kwargs: dict[str, Any], eta: datetime | None = None) -> None:
    """Deliver ``jobs.<job>(**kwargs)`` now (at ``eta`` if given)."""
    if settings.MCPTASKS_EMBEDDED_WORKER:
        embedded.submit(job, kwargs, eta=eta)
        return
    try:
        task = getattr(jobs, job)
        if eta is not None or _publisher().publish(task.name, kwargs) is None:
            task.apply_async(kwargs=kwargs, eta=eta)
    except Exception:
        # The broker is only a wake-up: the sweeps find queued and due tasks again.
        log.warning(
            "job delivery failed; the sweeps will recover it", exc_info=True, extra={"job": job}
        )
