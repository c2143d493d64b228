"""Celery entry points: thin and idempotent (STYLE rule 8). Take ids, reload, call."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from celery.signals import worker_ready

from mcptasks import lifecycle, sweeps

log = logging.getLogger(__name__)


@worker_ready.connect
def start_keeper(sender: Any = None, **_: Any) -> None:
    """The worker's keeper thread: heartbeat, and the sweeps when beat's are late."""
    from mcptasks import keeper

    pool = getattr(sender, "pool", None)
    keeper.start(
        worker=getattr(sender, "hostname", None),
        concurrency=int(getattr(pool, "num_processes", 0) or 0),
    )


@shared_task(name="mcptasks.run_task")
def run_task(task_id: str) -> None:
    """Run or resume a task (returns quietly if it is gone, taken, terminal or capped); if its
    claim filled a running cap, deliver a task that cap held back."""
    from mcptasks import fairshare, runner

    state, filled_cap = runner.run_attempt(task_id)
    if state is not None and filled_cap:
        fairshare.dispatch_ready(task_id)


@shared_task(name="mcptasks.wake_task")
def wake_task(task_id: str) -> None:
    try:
        lifecycle.task_wake(task_id=task_id)
    except lifecycle.LifecycleError:
        pass  # already woken by the sweep, cancelled, or not yet due (the sweep will)


@shared_task(name="mcptasks.sweep")
def sweep() -> dict[str, int]:
    return sweeps.run_all()


@shared_task(name="mcptasks.purge_audit_due")
def purge_audit_due() -> int:
    """Apply every tenant's audit retention policy (daily)."""
    from audit.retention import purge_due

    return len(purge_due())


@shared_task(name="mcptasks.write_audit_digests")
def write_audit_digests() -> int:
    """Write the signed digest of every chain whose head moved (hourly; audit/digests.py)."""
    from audit.digests import write_digests

    return len(write_digests())


@shared_task(name="mcptasks.deliver_outbox")
def deliver_outbox(delivery_id: int) -> str:
    """Send one outbox delivery and the due ones behind it (mcptasks/outbox/delivery.py)."""
    from mcptasks.outbox import delivery

    return delivery.deliver(delivery_id)


@shared_task(name="mcptasks.stream_audit")
def stream_audit(destination_id: int) -> int:
    """Send a destination's audit stream from its cursor, in chain order."""
    from mcptasks.outbox import delivery

    return delivery.stream_audit(destination_id)
