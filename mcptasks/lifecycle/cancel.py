"""Cancelling: recorded intent, cancel at once or at a safe point, force cancel."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from audit.record import Actor
from mcptasks.lifecycle._core import (
    RELEASED_LEASE,
    SUSPENDED_STATES,
    S,
    TaskNotFound,
    _apply,
    _audit,
    _changed,
    _leave_open_effects,
    _supersede_pending,
)
from mcptasks.models import ACTIVE_STATES, Task


def _after_suspend(task: Task, actor: Actor) -> Task:
    """A task that suspends with cancel intent recorded is cancelled at once."""
    if task.cancel_requested_at is None:
        return task
    return _cancel_now(task.pk, actor=actor)


def _cancel_now(task_id: str, *, actor: Actor, attempt: int | None = None) -> Task:
    task = _apply(
        task_id,
        verb="cancel_now",
        target=S.CANCELLED,
        fence=attempt,
        sources=[S.RUNNING] if attempt is not None else SUSPENDED_STATES,
        where=Q(cancel_requested_at__isnull=False),
        **RELEASED_LEASE,
        wake_at=None,
        status_message="Cancelled",
    )
    _supersede_pending(task_id)
    _leave_open_effects(task, actor=actor, cause="cancel")
    _audit(task, "task.cancelled", actor)
    _changed(task)
    return task


def task_cancel_now(*, task_id: str, actor: Actor, attempt: int | None = None) -> Task:
    """Honour recorded cancel intent: a suspended task at once, or (with ``attempt``) a
    running one at its next safe point."""
    with transaction.atomic():
        return _cancel_now(task_id, actor=actor, attempt=attempt)


class CancelResult(StrEnum):
    """What a request to cancel did (lifecycle decides it; each channel renders it)."""

    REQUESTED = "requested"  # intent recorded: the running task stops at its next safe point
    CANCELLED = "cancelled"  # the task was not running: cancelled at once
    ALREADY_REQUESTED = "already_requested"  # intent was recorded before; nothing changed
    ALREADY_ENDED = "already_ended"  # the task is terminal: nothing to cancel, nothing changed


@dataclass(frozen=True)
class CancelOutcome:
    task: Task
    result: CancelResult

    @property
    def ended(self) -> bool:
        """The task had already ended: the request changed nothing and recorded nothing."""
        return self.result is CancelResult.ALREADY_ENDED

    @property
    def ended_reason(self) -> str:
        """Why nothing was cancelled, naming the task's final state (for a terminal task)."""
        return f"The task already ended ({self.task.state}); a terminal task never changes."


def task_request_cancel(*, task_id: str, actor: Actor, reason: str = "") -> CancelOutcome:
    """Record cancel intent and acknowledge; a task that is not running is cancelled at once.

    Cancelling a terminal task, or one whose cancel was already asked for, changes nothing and
    audits nothing (the outcome says which: :class:`CancelResult`).
    """
    with transaction.atomic():
        now = timezone.now()
        recorded = Task.objects.filter(
            pk=task_id, state__in=ACTIVE_STATES, cancel_requested_at__isnull=True
        ).update(
            cancel_requested_at=now,
            cancel_requested_by_id=actor.user_id,
            cancel_reason=reason[:2000],
            updated_at=now,
        )
        task = Task.objects.select_related("tenant").filter(pk=task_id).first()
        if task is None:
            raise TaskNotFound(task_id)
        if not recorded:
            return CancelOutcome(
                task,
                CancelResult.ALREADY_ENDED if task.is_terminal else CancelResult.ALREADY_REQUESTED,
            )
        _audit(task, "task.cancel_requested", actor, {"reason": reason})
        if task.state in SUSPENDED_STATES:
            return CancelOutcome(_cancel_now(task_id, actor=actor), CancelResult.CANCELLED)
    return CancelOutcome(task, CancelResult.REQUESTED)


def task_force_cancel(*, task_id: str, actor: Actor, reason: str) -> Task:
    """End a task immediately whatever it is doing; an effect in flight becomes unknown."""
    if not reason.strip():
        raise ValueError("a force cancel needs a reason")
    with transaction.atomic():
        now = timezone.now()
        task = _apply(
            task_id,
            verb="force_cancel",
            target=S.CANCELLED,
            cancel_requested_at=now,
            cancel_requested_by_id=actor.user_id,
            cancel_reason=reason[:2000],
            **RELEASED_LEASE,
            wake_at=None,
            status_message=f"Force-cancelled: {reason[:500]}",
        )
        _supersede_pending(task_id)
        _audit(task, "task.force_cancelled", actor, {"reason": reason})
        _leave_open_effects(task, actor=actor, cause="force_cancel")
        # Its running attempt, if any, is fenced off: its next write is refused.
        _changed(task)
    return task
