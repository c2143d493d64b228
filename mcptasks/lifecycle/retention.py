"""The end of a task's life: expiry past its TTL and purge past the grace period."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from audit import holds
from audit.record import Actor
from mcptasks.lifecycle._core import (
    RELEASED_LEASE,
    S,
    _apply,
    _audit,
    _changed,
    _leave_open_effects,
    _supersede_pending,
    error_object,
)
from mcptasks.models import TERMINAL_STATES, EffectState, Task


def task_expire(*, task_id: str) -> Task:
    """Fail a non-terminal task past its TTL (terminal states never change)."""
    with transaction.atomic():
        error = error_object("Task expired: it did not finish within its ttlMs")
        # expires_at comes from the application clock (created_at + ttlMs), and so does the
        # sweep's choice of candidates: judge it by that clock too, not the database's.
        task = _apply(
            task_id,
            verb="expire",
            target=S.FAILED,
            where=Q(expires_at__lte=timezone.now()),
            error=error,
            status_message=error["message"],
            **RELEASED_LEASE,
            wake_at=None,
        )
        _supersede_pending(task_id)
        _leave_open_effects(task, actor=Actor.system("sweeper"), cause="expired")
        _audit(task, "task.expired", Actor.system("sweeper"))
        _changed(task)
    return task


UNDECIDED_EFFECTS = (EffectState.INTENDED, EffectState.UNKNOWN)


def task_purge(*, task_id: str) -> bool:
    """Delete a terminal task past its TTL plus the grace period, unless a legal hold covers
    it (:func:`audit.holds.task_is_held`). Audit rows stay.

    A task with an effect whose outcome is not known yet is kept (an effect left ``intended``
    first becomes ``unknown``): deleting it would drop the effect from the operator's queue.
    It is purged by a later sweep, once every such effect is reconciled."""
    grace = timedelta(seconds=settings.MCPTASKS_TERMINAL_GRACE_S)
    with transaction.atomic():
        task = (
            Task.objects.select_related("tenant")
            .filter(pk=task_id, state__in=TERMINAL_STATES, expires_at__lte=timezone.now() - grace)
            .first()
        )
        if task is None or holds.task_is_held(task.tenant_id, task.pk):
            return False
        _leave_open_effects(task, actor=Actor.system("sweeper"), cause="purge")
        deleted, _ = (
            Task.objects.filter(pk=task_id, state__in=TERMINAL_STATES)
            .exclude(effects__state__in=UNDECIDED_EFFECTS)
            .delete()
        )
        if not deleted:
            return False
        _audit(task, "task.purged", Actor.system("sweeper"))
    return True
