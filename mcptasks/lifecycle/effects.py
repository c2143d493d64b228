"""Effects of a step (intended, applied, unknown) and their reconciliation by an operator."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import DateTimeField, ExpressionWrapper, Q, Value
from django.db.models.functions import Now
from django.utils import timezone

from audit.record import Actor
from mcptasks.lifecycle._core import (
    RELEASED_LEASE,
    AttemptMayBeAlive,
    EffectNotUnknown,
    S,
    _apply,
    _audit,
    _changed,
    _fence,
    _leave_open_effects,
    _run_on_commit,
    error_object,
)
from mcptasks.lifecycle.cancel import _after_suspend
from mcptasks.models import Effect, EffectState, Task


def task_effect_intended(
    *, task_id: str, attempt: int, step: str, idempotency_key: str, idempotent: bool
) -> Effect:
    """Record that an effect is about to run (committed before the downstream call)."""
    with transaction.atomic():
        _fence(task_id, attempt)
        tenant_id = Task.objects.filter(pk=task_id).values_list("tenant_id", flat=True).get()
        effect, created = Effect.objects.get_or_create(
            task_id=task_id,
            step=step,
            defaults={
                "tenant_id": tenant_id,
                "idempotency_key": idempotency_key,
                "idempotent": idempotent,
                "state": EffectState.INTENDED,
                "attempt": attempt,
            },
        )
        if not created:
            Effect.objects.filter(pk=effect.pk).update(
                state=EffectState.INTENDED, attempt=attempt, updated_at=timezone.now()
            )
            effect.refresh_from_db()
    return effect


def task_effect_applied(
    *, task_id: str, attempt: int, step: str, result: Any, external_ref: str = ""
) -> None:
    with transaction.atomic():
        _fence(task_id, attempt)
        Effect.objects.filter(task_id=task_id, step=step, state=EffectState.INTENDED).update(
            state=EffectState.APPLIED,
            result=result,
            external_ref=external_ref[:500],
            updated_at=timezone.now(),
        )


def task_mark_effect_unknown(*, task_id: str, attempt: int, step: str) -> Task:
    """A non-idempotent effect found ``intended`` on replay: wait for an operator."""
    with transaction.atomic():
        task = _apply(
            task_id,
            verb="mark_effect_unknown",
            target=S.NEEDS_RECONCILIATION,
            fence=attempt,
            **RELEASED_LEASE,
            status_message=f"Waiting for an operator to reconcile step {step!r}",
        )
        _leave_open_effects(task, actor=Actor.system("worker"), cause="replay")
        _changed(task)
        task = _after_suspend(task, Actor.system("worker"))
    return task


RECONCILE_DECISIONS = ("applied", "not_applied", "fail")


def task_reconcile_effect(
    *, effect_id: int, actor: Actor, decision: str, note: str, external_ref: str = ""
) -> Task:
    """Decide an unknown effect. On a waiting task: applied → the step continues with that
    outcome; not_applied → the step runs again; fail → the task fails. On a terminal task the
    decision only records what happened. A second decision is refused."""
    if decision not in RECONCILE_DECISIONS:
        raise ValueError(f"decision must be one of {', '.join(RECONCILE_DECISIONS)}")
    if not note.strip():
        raise ValueError("a reconciliation needs a reason")
    new_state = {
        "applied": EffectState.RECONCILED_APPLIED,
        "not_applied": EffectState.RECONCILED_NOT_APPLIED,
        "fail": EffectState.FAILED,
    }[decision]
    with transaction.atomic():
        effect = Effect.objects.select_related("task__tenant").filter(pk=effect_id).first()
        if effect is None:
            raise EffectNotUnknown(effect_id)
        now = timezone.now()
        fields: dict[str, Any] = {
            "state": new_state,
            "reconciled_by_id": actor.user_id,
            "reconcile_note": note[:2000],
            "reconciled_at": now,
            "updated_at": now,
        }
        if decision == "applied":
            fields["external_ref"] = external_ref[:500]
            fields["result"] = {"external_ref": external_ref, "reconciled": True}
        undecided = Effect.objects.filter(pk=effect_id, state=EffectState.UNKNOWN)
        if decision == "not_applied":
            # The attempt that left it may still call the downstream: judged by the database
            # clock, like the lease itself.
            margin = timedelta(seconds=settings.MCPTASKS_RECONCILE_MARGIN_S)
            presumed_dead = Q(holder_lease_expires_at__isnull=True) | Q(
                holder_lease_expires_at__lte=ExpressionWrapper(
                    Now() - Value(margin), output_field=DateTimeField()
                )
            )
            if undecided.filter(presumed_dead).update(**fields) != 1:
                current = Effect.objects.filter(pk=effect_id).first()
                if current is not None and current.state == EffectState.UNKNOWN:
                    assert current.not_applied_from is not None
                    raise AttemptMayBeAlive(current.step, current.not_applied_from)
                raise EffectNotUnknown(effect_id)
        elif undecided.update(**fields) != 1:
            raise EffectNotUnknown(effect_id)
        task = effect.task
        waiting_more = Effect.objects.filter(task_id=task.pk, state=EffectState.UNKNOWN).exists()
        if task.state == S.NEEDS_RECONCILIATION:
            if decision == "fail":
                error = error_object(
                    f"Operator failed the task while reconciling step {effect.step!r}: {note[:500]}"
                )
                task = _apply(
                    task.pk,
                    verb="reconcile_effect",
                    target=S.FAILED,
                    error=error,
                    status_message=error["message"],
                )
            elif not waiting_more:
                task = _apply(
                    task.pk,
                    verb="reconcile_effect",
                    target=S.QUEUED,
                    status_message="Reconciled; resuming",
                )
                _run_on_commit(task)
        _audit(
            task,
            "effect.reconciled",
            actor,
            {"step": effect.step, "decision": decision, "note": note, "external_ref": external_ref},
        )
        if task.state == S.FAILED:
            _leave_open_effects(task, actor=actor, cause="failed")
        _changed(task)
    return task
