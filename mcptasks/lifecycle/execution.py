"""The worker's verbs: claim, lease, report, steps, sleep and wake, complete, fail, overrun."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Now
from django.utils import timezone

from audit.record import Actor
from mcptasks import events, fairshare
from mcptasks.canonical import digest
from mcptasks.lifecycle._core import (
    RELEASED_LEASE,
    AtCapacity,
    Audited,
    S,
    _apply,
    _audit,
    _audited_move,
    _changed,
    _fence,
    _lease_deadline,
    _leave_open_effects,
    _refusal,
    _remember_leaving_lease,
    _run_on_commit,
    _supersede_pending,
    error_object,
)
from mcptasks.lifecycle.cancel import _after_suspend, _cancel_now
from mcptasks.models import GateOutcome, InputKind, InputRequest, Task, TaskStep, Tenant
from mcptasks.plans import generic_plans


@dataclass(frozen=True)
class Claimed:
    """A claimed task, and whether its claim left its tenant or principal at a running cap
    (then the run's end looks for a task that cap held back: ``fairshare.dispatch_ready``)."""

    task: Task
    fills_cap: bool


def task_claim(*, task_id: str, worker: str) -> Task:
    """Take a queued task for one attempt: lease, attempt + 1 (the new fencing token)."""
    return claim(task_id=task_id, worker=worker).task


def claim(*, task_id: str, worker: str) -> Claimed:
    """:func:`task_claim`, with what its cap check found."""
    with generic_plans():  # (a transaction) the claim finds its task by id, twice
        room = fairshare.claim_room(task_id)
        if room.refusal:
            raise AtCapacity(f"task {task_id} waits for room: {room.refusal}")
        task = _audited_move(
            task_id,
            tenant_id=room.tenant_id,
            tenant_slug=room.tenant_slug,
            audited=Audited("task.started", Actor.system(worker), from_row=("attempt",)),
            verb="claim",
            target=S.RUNNING,
            lease_owner=worker,
            lease_expires_at=_lease_deadline(),
            attempt=F("attempt") + 1,
            wake_at=None,
        )
        _changed(task)
    return Claimed(task, room.fills_cap)


def task_renew_lease(*, task_id: str, attempt: int) -> None:
    """Extend the lease of a running attempt (not audited, not a visible change)."""
    _fence(task_id, attempt)


def task_requeue(*, task_id: str) -> Task:
    """Give a running task whose lease expired back to the queue (the reaper's verb)."""
    with transaction.atomic():
        # The attempt's effects still intended stay so (the replay decides: an idempotent one
        # runs again); _apply remembers when that attempt's lease ran out, for reconciliation.
        task = _apply(
            task_id,
            verb="requeue",
            target=S.QUEUED,
            where=Q(lease_expires_at__lt=Now()),
            **RELEASED_LEASE,
            lost_attempts=F("lost_attempts") + 1,
        )
        _audit(task, "task.requeued", Actor.system("reaper"), {"attempt": task.attempt})
        _changed(task)
        # Cancel intent recorded while it ran: queued now, so honoured at once, not run again.
        task = _after_suspend(task, Actor.system("reaper"))
        if task.state == S.QUEUED:
            _run_on_commit(task)
    return task


def task_report(*, task_id: str, attempt: int, message: str) -> Task:
    """Set the status message of a running task (a visible change; not audited)."""
    with transaction.atomic():
        task = _apply(
            task_id,
            verb="report",
            target=S.RUNNING,
            fence=attempt,
            status_message=message[:2000],
            lease_expires_at=_lease_deadline(),
        )
        _changed(task)
    return task


def task_record_step(*, task_id: str, attempt: int, key: str, kind: str, value: Any) -> None:
    """Record a replay step's outcome (fenced: only the attempt holding the task may write)."""
    with transaction.atomic():
        _fence(task_id, attempt)
        TaskStep.objects.create(task_id=task_id, key=key, kind=kind, value=value)


def task_record_job(*, task_id: str, attempt: int, backend_job_id: str) -> None:
    with transaction.atomic():
        _fence(task_id, attempt)
        Task.objects.filter(pk=task_id).update(backend_job_id=backend_job_id[:200])


def task_sleep(*, task_id: str, attempt: int, wake_at: datetime, message: str = "") -> Task:
    """Suspend a running task on a durable timer; it holds no worker until ``wake_at``."""
    with transaction.atomic():
        extra: dict[str, Any] = {"status_message": message} if message else {}
        task = _apply(
            task_id,
            verb="sleep",
            target=S.SLEEPING,
            fence=attempt,
            wake_at=wake_at,
            **RELEASED_LEASE,
            **extra,
        )
        _audit(task, "task.sleeping", Actor.system("worker"), {"wake_at": wake_at.isoformat()})
        _changed(task)
        task = _after_suspend(task, Actor.system("worker"))
        delay = (wake_at - timezone.now()).total_seconds()
        if task.state == S.SLEEPING and delay <= settings.MCPTASKS_TIMER_ETA_MAX_S:
            events.enqueue_on_commit("wake_task", eta=wake_at, task_id=task.pk)
    return task


def task_wake(*, task_id: str) -> Task:
    """Queue a sleeping task whose timer is due."""
    with transaction.atomic():
        task = _apply(
            task_id,
            verb="wake",
            target=S.QUEUED,
            where=Q(wake_at__lte=timezone.now()),
            wake_at=None,
        )
        _audit(task, "task.woken", Actor.system("timer"))
        _changed(task)
        _run_on_commit(task)
    return task


def task_complete(
    *,
    task_id: str,
    attempt: int,
    result: dict[str, Any],
    rejected: bool | None = None,
    tenant: Tenant | None = None,
) -> Task:
    """Complete a running attempt with its CallToolResult (``isError`` results included).
    ``rejected``: whether an approval gate of the task was rejected, when the caller knows
    (the runner read the task's input requests); None reads it. ``tenant``: the task's, when
    the caller has it (then the completion and its audit event may be one statement)."""
    size = len(json.dumps(result))
    if size > settings.MCPTASKS_MAX_RESULT_BYTES:
        return task_fail(
            task_id=task_id,
            attempt=attempt,
            actor=Actor.system("worker"),
            error=error_object(
                f"Tool result of {size} bytes exceeded the limit of "
                f"{settings.MCPTASKS_MAX_RESULT_BYTES} bytes (MCPTASKS_MAX_RESULT_BYTES)"
            ),
        )
    # A task whose approval gate was rejected completes as the tool decides on the wire, but is
    # *rejected* everywhere else: never a plain "completed" that hides a rejection.
    if rejected is None:
        rejected = InputRequest.objects.filter(
            task_id=task_id, kind=InputKind.APPROVAL, outcome=GateOutcome.REJECTED
        ).exists()
    outcome = GateOutcome.REJECTED.value if rejected else ""
    completed = Audited(
        "task.completed",
        Actor.system("worker"),
        {"is_error": bool(result.get("isError")), **({"outcome": outcome} if outcome else {})},
    )
    # One statement when it can be (the tenant known), else its own transaction.
    task = _audited_move(
        task_id,
        tenant_id=None if tenant is None else tenant.pk,
        tenant_slug="" if tenant is None else tenant.slug,
        audited=completed,
        verb="complete",
        target=S.COMPLETED,
        fence=attempt,
        result=result,
        **RELEASED_LEASE,
        outcome=outcome,
        status_message=(
            "Rejected"
            if rejected
            else "Completed with a tool error"
            if result.get("isError")
            else "Completed"
        ),
    )
    _changed(task)
    return task


def task_fail(
    *,
    task_id: str,
    error: dict[str, Any],
    actor: Actor,
    attempt: int | None = None,
    failure: dict[str, Any] | None = None,
) -> Task:
    """Fail a task with a JSON-RPC error object: a running attempt's, or (no attempt) any
    active task, for sweepers and operators. ``failure``: the diagnosis (failures.py)."""
    extra: dict[str, Any] = {"failure": failure} if failure else {}
    with transaction.atomic():
        task = _apply(
            task_id,
            verb="fail",
            target=S.FAILED,
            fence=attempt,
            sources=[S.RUNNING] if attempt is not None else None,
            error=error,
            status_message=error["message"][:2000],
            **RELEASED_LEASE,
            wake_at=None,
            **extra,
        )
        _supersede_pending(task_id)
        _leave_open_effects(task, actor=actor, cause="failed")
        _audit(task, "task.failed", actor, {"error": error, **extra})
        _changed(task)
    return task


def task_stop_overrun(*, task_id: str, attempt: int, limit_s: float) -> Task:
    """The worker's watchdog: end a running attempt past its tool's maximum run time — cancelled
    if a cancel was asked for (its step ignored it), else failed. Its step may still be inside
    a downstream call: its open effects become unknown, "not applied" waiting out its lease."""
    with transaction.atomic():
        _remember_leaving_lease(task_id)
        row = Task.objects.filter(pk=task_id, state=S.RUNNING, attempt=attempt).values(
            "cancel_requested_at"
        )
        if not row:
            raise _refusal(task_id, "stop", attempt)
        actor = Actor.system("watchdog")
        if row[0]["cancel_requested_at"] is not None:
            return _cancel_now(task_id, actor=actor, attempt=attempt)
        return task_fail(
            task_id=task_id,
            attempt=attempt,
            actor=actor,
            error=error_object(
                f"Task exceeded the maximum run time of {limit_s:g} s "
                "(the tool's max_run_s, or MCPTASKS_MAX_RUN_S); its step was stopped"
            ),
        )


def task_record_step_log(*, task_id: str, attempt: int, step_log: list[str]) -> None:
    """Store the step sequence of the running attempt (fenced)."""
    with transaction.atomic():
        _fence(task_id, attempt)
        Task.objects.filter(pk=task_id).update(step_log=step_log)


def task_note_binding_change(*, task_id: str, attempt: int, changes: dict[str, Any]) -> None:
    """Audit that a task resumed under another server build or tool policy revision."""
    with transaction.atomic():
        _fence(task_id, attempt)
        # The task row keeps the binding it was created with; the accepted new binding is
        # remembered as a step, so later resumes under it do not report the change again.
        accepted = "binding:" + digest({field: new for field, (_old, new) in changes.items()})
        _, first_time = TaskStep.objects.get_or_create(
            task_id=task_id, key=accepted[:200], defaults={"kind": "binding", "value": changes}
        )
        if first_time:
            task = Task.objects.select_related("tenant").get(pk=task_id)
            _audit(task, "task.binding_changed", Actor.system("worker"), {"changes": changes})
