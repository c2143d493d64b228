"""Periodic sweeps (Celery beat / the embedded beat thread).

Each sweep lists candidates with one query and applies a lifecycle verb per row; the verb's
conditional UPDATE makes two sweeps running at once harmless (the loser gets a LifecycleError).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db.models.functions import Now
from django.utils import timezone

from audit import holds, partitions, seal
from mcptasks import events, fairshare, heartbeats, lifecycle, task_partitions
from mcptasks.models import (
    TERMINAL_STATES,
    EffectState,
    InputRequest,
    InputState,
    Task,
    TaskState,
    terminal_grace,
)
from mcptasks.periodic import AtMostEvery

log = logging.getLogger(__name__)
BATCH = 500


def _each(ids: list[str], verb: str, **kwargs: object) -> int:
    done = 0
    for task_id in ids:
        try:
            getattr(lifecycle, verb)(task_id=task_id, **kwargs)
            done += 1
        except lifecycle.LifecycleError:
            pass  # another sweeper or a worker moved it first
    return done


def reap_leases() -> int:
    ids = list(
        Task.objects.filter(state=TaskState.RUNNING, lease_expires_at__lt=Now()).values_list(
            "pk", flat=True
        )[:BATCH]
    )
    return _each(ids, "task_requeue")


def wake_timers() -> int:
    ids = list(
        Task.objects.filter(state=TaskState.SLEEPING, wake_at__lte=timezone.now()).values_list(
            "pk", flat=True
        )[:BATCH]
    )
    return _each(ids, "task_wake")


def expire_tasks() -> int:
    ids = list(
        Task.objects.exclude(state__in=TERMINAL_STATES)
        .filter(expires_at__lte=timezone.now())
        .values_list("pk", flat=True)[:BATCH]
    )
    return _each(ids, "task_expire")


PURGE_DAYS_EVERY_S = 300.0  # how often a process tries to drop whole days
purging_days = AtMostEvery(PURGE_DAYS_EVERY_S)


def purge_tasks() -> int:
    """Purge the tasks past their TTL plus the grace: whole days first on PostgreSQL
    (:func:`lifecycle.task_purge_days`, at most every :data:`PURGE_DAYS_EVERY_S` per process:
    checking a day that something keeps reads it, and a day can wait minutes), then row by row
    what no day's purge covers."""
    now = timezone.now()
    purged = sum(tasks for _, tasks in purging_days.run(lambda: lifecycle.task_purge_days(now)))
    cutoff = now - terminal_grace()
    due = Task.objects.filter(state__in=TERMINAL_STATES, expires_at__lte=cutoff)
    below = task_partitions.row_purge_below(now)
    if below is not None:  # the days after wait for their whole-day purge
        due = due.filter(id__lt=below)
    # A task whose unknown effect waits for an operator is kept until it is reconciled.
    ids = list(
        due.exclude(effects__state=EffectState.UNKNOWN)
        .exclude(holds.held_tasks_q())  # held tasks must not fill every batch
        .values_list("pk", flat=True)[:BATCH]
    )
    return purged + sum(1 for task_id in ids if lifecycle.task_purge(task_id=task_id))


def timeout_inputs() -> int:
    done = 0
    from mcptasks.tools.registry import registry

    rows = InputRequest.objects.filter(
        state=InputState.PENDING, deadline_at__lte=timezone.now()
    ).values_list("task_id", "key", "task__tool_name")[:BATCH]
    for task_id, key, tool_name in rows:
        tool_def = registry.get(tool_name)
        answer = tool_def is not None and tool_def.on_input_timeout == "answer"
        try:
            lifecycle.task_timeout_input(task_id=task_id, key=key, fail=not answer)
            done += 1
        except lifecycle.LifecycleError:
            pass
    return done


def _jobs_waiting() -> int:
    """Jobs waiting in the broker's queue (0 on the embedded worker, or when unknown)."""
    if settings.MCPTASKS_EMBEDDED_WORKER:
        return 0
    from mcptasks.celery import app

    try:
        with app.pool.acquire(block=True, timeout=2) as conn:
            return int(
                conn.default_channel.queue_declare(
                    queue=app.conf.task_default_queue, passive=True
                ).message_count
            )
    except Exception:
        return 0  # the broker is down: redelivering will fail and be retried next sweep


def redeliver_queued(older_than_s: float = 5.0) -> int:
    """Deliver again queued tasks nobody claimed: the broker may have lost the message, or a
    claim left it queued because its tenant ran its cap (fairshare.py).

    As many as the broker is short of, in fair order (round-robin by tenant, oldest first,
    none of a tenant at its running cap): while workers drain a backlog, re-sending every
    waiting task on every sweep would flood the queue with duplicates. And at least one, since
    the jobs waiting may be sweeps or wake-ups rather than runs of queued tasks.
    """
    cutoff = timezone.now() - timedelta(seconds=older_than_s)
    missing = Task.objects.filter(state=TaskState.QUEUED).count() - _jobs_waiting()
    ids = fairshare.fair_queued_ids(min(BATCH, max(missing, 1)), updated_before=cutoff)
    for task_id in ids:
        events.dispatch_job("run_task", {"task_id": task_id})
    return len(ids)


def outbox_due() -> int:
    """Deliveries and audit streams whose wake-up the broker may have lost."""
    from mcptasks.outbox import delivery

    return delivery.sweep()


def seal_audit() -> int:
    """The sealer's backstop (audit/seal.py): audit events committed but left unsealed, e.g.
    by a process that died before its sealer thread ran."""
    return seal.seal_pending()


def audit_partitions() -> int:
    """The audit events' partitions of the coming months (audit/partitions.py), at most
    hourly per process; how many were created."""
    return len(partitions.ensure_due())


def task_partitions_ahead() -> int:
    """The task table's partitions of the coming days (mcptasks/task_partitions.py), at most
    hourly per process; how many were created."""
    return len(task_partitions.ensure_due())


def run_all() -> dict[str, int]:
    done = {
        "audit_sealed": seal_audit(),
        "audit_partitions": audit_partitions(),
        "task_partitions": task_partitions_ahead(),
        "reaped": reap_leases(),
        "woken": wake_timers(),
        "expired": expire_tasks(),
        "purged": purge_tasks(),
        "input_timeouts": timeout_inputs(),
        "redelivered": redeliver_queued(),
        "outbox": outbox_due(),
    }
    heartbeats.beat(heartbeats.SWEEP, **done)  # workers run the sweeps themselves when this is late
    return done
