"""Fair share of the workers between tenants and principals (issue 22).

Caps on *running* tasks — per tenant and per principal, from the settings or a tenant's own
fields (Django admin) — are checked when a worker claims a task, with the tenant's and the
principal's rows locked so that concurrent claims cannot overshoot. A claim refused for a cap
changes nothing: the task stays ``queued`` (the row is the truth), the worker slot is free at
once for the next message, and the task is delivered again when its tenant has room — by the
worker whose run ended at the cap (:func:`dispatch_ready`) or by the redelivery sweep, which
picks queued tasks round-robin across tenants (:func:`fair_queued_ids`) and skips those at
their cap. Only a run whose claim filled a cap looks for such a task when it ends (below the
caps no claim was refused for room it could free; one refused after a later claim filled the
cap is delivered when that run ends, or by the sweep). So a
flood from one tenant never holds every worker, and queued work never holds one either.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Count, F, Window
from django.db.models.functions import RowNumber

from mcptasks.models import Task, TaskState, Tenant
from mcptasks.plans import literal


def caps(tenant: Tenant) -> tuple[int, int]:
    """``(tenant cap, principal cap)`` on running tasks; 0 means no cap."""
    return _caps(tenant.max_running_tasks, tenant.max_running_tasks_per_principal)


def _caps(tenant_cap: int | None, principal_cap: int | None) -> tuple[int, int]:
    """The caps from a tenant's two fields (None: the setting)."""
    return (
        settings.MCPTASKS_MAX_RUNNING_TASKS_PER_TENANT if tenant_cap is None else tenant_cap,
        settings.MCPTASKS_MAX_RUNNING_TASKS_PER_PRINCIPAL
        if principal_cap is None
        else principal_cap,
    )


@dataclass(frozen=True)
class Room:
    """What a claim found under the locks: why it may not proceed (a cap is reached), or
    None; and whether taking the task leaves its tenant or principal at a cap — then the run's
    end may free the slot a refused claim waits for (:func:`dispatch_ready`)."""

    refusal: str | None = None
    fills_cap: bool = False
    # The task's tenant, read by the same statement (None: the task is not queued).
    tenant_id: int | None = None
    tenant_slug: str = ""


def claim_refusal(task_id: str) -> str | None:
    """Why a queued task may not be claimed now (a cap is reached), or None (see
    :func:`claim_room`)."""
    return claim_room(task_id).refusal


def claim_room(task_id: str) -> Room:
    """Whether a queued task may be claimed now, and whether its claim fills a cap.

    Call inside the claim's transaction: the statement that reads the tenant's caps locks the
    tenant's row and the principal's, so two workers claiming for the same tenant count one
    after the other (the principal's is locked with it, capped or not: one statement less
    than locking it apart). ``FOR NO KEY UPDATE``:
    creating a task takes ``FOR KEY SHARE`` on both rows (its foreign keys) and must not wait
    for, or deadlock with, a claim."""
    with connection.cursor() as cursor:
        cursor.execute(_claim_lock_statement(), [task_id, TaskState.QUEUED])
        row = cursor.fetchone()
    if row is None:
        return Room()  # the claim itself refuses it
    tenant_id, principal_id, slug, tenant_field, principal_field = row
    tenant_cap, principal_cap = _caps(tenant_field, principal_field)
    if not tenant_cap and not principal_cap:
        return Room(tenant_id=tenant_id, tenant_slug=slug)
    room = _room(slug, (tenant_cap, principal_cap), *running_counts(tenant_id, principal_id))
    return replace(room, tenant_id=tenant_id, tenant_slug=slug)


def running_counts(tenant_id: int, principal_id: int) -> tuple[int, int]:
    """How many tasks run for the tenant, and for the principal."""
    with connection.cursor() as cursor:
        cursor.execute(_running_statement(), [tenant_id, principal_id])
        tenant_running, principal_running = cursor.fetchone()
    return tenant_running, principal_running


@functools.cache
def _running_statement() -> str:
    """The running tasks of a tenant and of a principal, counted in one statement built once (the
    ORM's compile of the same aggregate cost more than its round trip; issue 23). The state is
    written in (:func:`mcptasks.plans.literal`): the claim runs it on its generic plan
    (:func:`mcptasks.plans.generic_plans`), which must know it reads the few running tasks."""
    return (
        "SELECT COUNT(*) FILTER (WHERE tenant_id = %s), COUNT(*) FILTER (WHERE principal_id = %s) "  # noqa: S608 - names from the models
        f"FROM {Task._meta.db_table} WHERE state = {literal(TaskState.RUNNING)}"
    )


@functools.cache
def _claim_lock_statement() -> str:
    """The queued task's tenant and principal, and the tenant's caps, with both rows locked
    (one statement; where the database has no row locks, as SQLite, a plain read)."""
    user = get_user_model()._meta
    lock = " FOR NO KEY UPDATE OF n, u" if connection.features.has_select_for_update_of else ""
    return (
        "SELECT t.tenant_id, t.principal_id, n.slug, n.max_running_tasks, "  # noqa: S608 - names from the models
        f"n.max_running_tasks_per_principal FROM {Task._meta.db_table} t "
        f"JOIN {Tenant._meta.db_table} n ON n.id = t.tenant_id "
        f"JOIN {user.db_table} u ON u.{user.pk.column} = t.principal_id "  # type: ignore[union-attr]
        f"WHERE t.id = %s AND t.state = %s{lock}"
    )


def _room(slug: str, limits: tuple[int, int], tenant_running: int, principal_running: int) -> Room:
    tenant_cap, principal_cap = limits
    if tenant_cap and tenant_running >= tenant_cap:
        return Room(f"tenant {slug} runs {tenant_running} tasks (cap {tenant_cap})")
    if principal_cap and principal_running >= principal_cap:
        return Room(f"principal runs {principal_running} tasks (cap {principal_cap})")
    return Room(
        fills_cap=bool(tenant_cap and tenant_running + 1 >= tenant_cap)
        or bool(principal_cap and principal_running + 1 >= principal_cap)
    )


def fair_queued_ids(limit: int, *, updated_before: object = None) -> list[str]:
    """Up to ``limit`` queued task ids in a fair order: the oldest of each tenant first, then
    the second oldest of each, and so on (round-robin by tenant); a tenant contributes no more
    than the room left under its running cap."""
    queued = Task.objects.filter(state=TaskState.QUEUED)
    if updated_before is not None:
        queued = queued.filter(updated_at__lt=updated_before)
    ranked = queued.annotate(
        turn=Window(RowNumber(), partition_by=[F("tenant_id")], order_by=F("updated_at").asc())
    ).order_by("turn", "updated_at")
    room = _room_by_tenant()
    chosen: list[str] = []
    # Reads at most ``limit`` rows per tenant with room (and skips capped tenants in SQL).
    full = [tenant_id for tenant_id, left in room.items() if left <= 0]
    for task_id, tenant_id in ranked.exclude(tenant_id__in=full).values_list("pk", "tenant_id")[
        : limit * 4
    ]:
        left = room.get(tenant_id)
        if left is not None:
            if left <= 0:
                continue
            room[tenant_id] = left - 1
        chosen.append(task_id)
        if len(chosen) >= limit:
            break
    return chosen


def _room_by_tenant() -> dict[int, int]:
    """Free running slots of each capped tenant that has queued tasks (uncapped: absent)."""
    tenants = Tenant.objects.filter(tasks__state=TaskState.QUEUED).distinct()
    running = dict(
        Task.objects.filter(state=TaskState.RUNNING)
        .values_list("tenant_id")
        .annotate(n=Count("pk"))
        .values_list("tenant_id", "n")
    )
    room = {}
    for tenant in tenants:
        tenant_cap, _ = caps(tenant)
        if tenant_cap:
            room[tenant.pk] = tenant_cap - running.get(tenant.pk, 0)
    return room


def dispatch_ready(task_id: str) -> None:
    """After a run of ``task_id`` ended: deliver a queued task that a cap may have held back,
    now that there is room (the sweep would, a sweep interval later).

    Only a tenant (or principal) that ran at its cap until this run ended can have had a claim
    refused, so nothing is read or sent otherwise: a task that was never refused still has its
    own message on the way, and a second one would only cost a worker a claim that fails."""
    from django.db import transaction

    from mcptasks import events

    row = Task.objects.filter(pk=task_id).values("tenant_id", "principal_id").first()
    tenant = Tenant.objects.filter(pk=row["tenant_id"]).first() if row else None
    if row is None or tenant is None:
        return
    tenant_cap, principal_cap = caps(tenant)
    if not tenant_cap and not principal_cap:
        return
    tenant_running, principal_running = running_counts(tenant.pk, row["principal_id"])
    # This run no longer counts: with it, was the tenant or the principal at its cap?
    principal_was_full = bool(principal_cap) and principal_running + 1 >= principal_cap
    tenant_was_full = bool(tenant_cap) and tenant_running + 1 >= tenant_cap
    if not principal_was_full and not tenant_was_full:
        return
    queued = Task.objects.filter(tenant_id=tenant.pk, state=TaskState.QUEUED)
    if principal_was_full and not tenant_was_full:
        queued = queued.filter(principal_id=row["principal_id"])
    next_id = queued.order_by("updated_at").values_list("pk", flat=True).first()
    if next_id is None:
        return
    with transaction.atomic():
        refused = claim_refusal(next_id)
    if refused is None:
        events.dispatch_job("run_task", {"task_id": next_id})
