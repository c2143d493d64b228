"""The end of a task's life: expiry past its TTL and purge past the grace period, a task at a
time or, on PostgreSQL, a whole day's partition at once."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import DatabaseError, transaction
from django.db.models import Q
from django.utils import timezone

from audit import holds
from audit.record import Actor, Unsealed, insert_unsealed
from mcptasks import task_partitions
from mcptasks.lifecycle._core import (
    RELEASED_LEASE,
    S,
    _apply,
    _audit,
    _changed,
    _leave_open_effects,
    _supersede_pending,
    _unsealed_audit_of,
    error_object,
)
from mcptasks.models import TERMINAL_STATES, EffectState, Task, terminal_grace

log = logging.getLogger(__name__)


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
    with transaction.atomic():
        task = (
            Task.objects.select_related("tenant")
            .filter(
                pk=task_id,
                state__in=TERMINAL_STATES,
                expires_at__lte=timezone.now() - terminal_grace(),
            )
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


def task_purge_days(now: datetime | None = None) -> list[tuple[str, int]]:
    """Drop every ended day whose tasks are all due (:func:`mcptasks.task_partitions.check_day`),
    oldest first: ``(partition, tasks)`` of each dropped. A day something keeps is left
    (logged), for a later sweep or the row-by-row purge. Nothing on SQLite, or with
    ``MCPTASKS_TASK_PARTITION_PURGE`` off."""
    if not task_partitions.purging():
        return []
    now = now or timezone.now()
    cutoff = now - terminal_grace()
    dropped = []
    for part in task_partitions.days_to_purge(now):
        try:
            with transaction.atomic():
                purged = _purge_day(part, cutoff)
        except DatabaseError as error:
            log.info("task partition kept", extra={"partition": part.name, "reason": str(error)})
            continue
        log.info("task partition purged", extra={"partition": part.name, "tasks": purged})
        dropped.append((part.name, purged))
    return dropped


def _purge_day(part: task_partitions.Partition, cutoff: datetime) -> int:
    """In the caller's transaction: check ``part`` (no lock), delete what points at its tasks,
    record each task's ``task.purged``, then check it again under a lock and drop it."""
    task_partitions.check_day(part, cutoff)
    lower, upper = str(part.lower), str(part.upper)
    in_part = Q(id__gte=lower, id__lt=upper)
    Task.objects.filter(retry_of_id__gte=lower, retry_of_id__lt=upper).exclude(in_part).update(
        retry_of=None
    )
    for related in Task._meta.related_objects:
        if related.related_model is Task or related.many_to_many:
            continue
        column = related.field.attname
        related.related_model._base_manager.filter(
            **{f"{column}__gte": lower, f"{column}__lt": upper}
        ).delete()
    tasks = Task.objects.filter(in_part).select_related("tenant")
    _record_purged(tasks.iterator(chunk_size=PURGED_EVENTS_BATCH), {"partition": part.name})
    return task_partitions.drop_day(part, cutoff)


PURGED_EVENTS_BATCH = 2000


def _record_purged(tasks: Iterable[Task], data: dict[str, Any]) -> None:
    """Each task's ``task.purged`` event. Where that event is all :func:`_audit` would write
    (events sealed after commit, the tenant subscribing to nothing), the events go in batches of
    :data:`PURGED_EVENTS_BATCH`, one statement each: a day can hold a million tasks."""
    actor = Actor.system("sweeper")
    batch: list[Unsealed] = []
    for task in tasks:
        event = _unsealed_audit_of(task, "task.purged", actor, data)
        if event is None:
            _audit(task, "task.purged", actor, data)
            continue
        batch.append(event)
        if len(batch) >= PURGED_EVENTS_BATCH:
            insert_unsealed(batch)
            batch = []
    insert_unsealed(batch)
