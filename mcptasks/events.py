"""Side effects that must only happen after commit: job delivery and live broadcast.

Pass ids and small dicts, never model instances (STYLE rule 6).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)


def dispatch_job(job: str, kwargs: dict[str, Any], eta: datetime | None = None) -> None:
    """Deliver a job now: to the in-process worker (embedded default) or to Celery."""
    if settings.MCPTASKS_EMBEDDED_WORKER:
        from mcptasks import embedded

        embedded.submit(job, kwargs, eta=eta)
        return
    from mcptasks import jobs

    try:
        getattr(jobs, job).apply_async(kwargs=kwargs, eta=eta)
    except Exception:
        # The broker is only a wake-up: the sweeps find queued and due tasks again.
        log.warning("job delivery failed; the sweeps will recover it", exc_info=True,
                    extra={"job": job})


def enqueue_on_commit(job: str, eta: datetime | None = None, **kwargs: Any) -> None:
    """Schedule ``jobs.<job>(**kwargs)`` once the current transaction commits."""
    transaction.on_commit(lambda: dispatch_job(job, kwargs, eta=eta))


def broadcast_on_commit(*, task_id: str, tenant_id: int, version: int) -> None:
    """Announce ``(task id, version)`` to groups ``task.<id>`` and ``tenant.<id>`` after commit.

    A no-op until the live-updates issue wires the channel layer: every visible change already
    calls it, so that issue changes only this function.
    """
    transaction.on_commit(lambda: None)
