"""Legal holds: what they cover is kept, whatever retention and task TTLs say (docs/audit.md).

A hold covers a whole tenant (``task_id`` empty) or one task of it. While active it stops

- audit retention (:mod:`audit.retention`): a tenant hold refuses the tenant's purge; a task
  hold stops the purge before the first event of that task (purges delete a prefix);
- TTL deletion of terminal tasks (:func:`mcptasks.lifecycle.task_purge` asks
  :func:`task_is_held`; the sweep skips held tasks with :func:`held_tasks_q`).

Placing and releasing are audited in the tenant's chain (``legal_hold.placed`` /
``legal_hold.released``: hold id, task, reason, and who in the event's actor).
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from audit.chain import chain_for_tenant
from audit.models import AuditEvent, LegalHold
from audit.record import Actor, record

PLACED = "legal_hold.placed"
RELEASED = "legal_hold.released"
MAX_REASON = 2000


class HoldError(Exception):
    """A hold request that cannot be honoured (unknown tenant, task or hold, no reason)."""


def _reason(reason: str) -> str:
    reason = (reason or "").strip()
    if not reason:
        raise HoldError("a legal hold needs a reason (the matter, ticket or order it serves)")
    if len(reason) > MAX_REASON:
        raise HoldError(f"the reason is longer than {MAX_REASON} characters")
    return reason


def place_hold(*, tenant_slug: str, task_id: str = "", reason: str, actor: Actor) -> LegalHold:
    """Place a hold on a tenant, or on one of its tasks (which may already be deleted, as
    long as the tenant's trail names it); audited."""
    from mcptasks.models import Task, Tenant

    reason = _reason(reason)
    tenant = Tenant.objects.filter(slug=tenant_slug).first()
    if tenant is None:
        raise HoldError(f"no tenant {tenant_slug!r}")
    if task_id and not (
        Task.objects.filter(pk=task_id, tenant=tenant).exists()
        or AuditEvent.objects.filter(chain=chain_for_tenant(tenant.slug), task_id=task_id).exists()
    ):
        raise HoldError(f"tenant {tenant.slug!r} has no task {task_id!r}")
    with transaction.atomic():
        hold = LegalHold.objects.create(
            tenant=tenant, task_id=task_id, reason=reason, placed_by=actor.display
        )
        record(
            action=PLACED,
            actor=actor,
            tenant_id=tenant.pk,
            tenant_slug=tenant.slug,
            task_id=task_id,
            data={"hold": hold.pk, "scope": "task" if task_id else "tenant", "reason": reason},
        )
    return hold


def release_hold(*, hold_id: int, reason: str, actor: Actor) -> LegalHold:
    """Release an active hold; audited. Retention and TTL deletion resume on their next run."""
    reason = _reason(reason)
    with transaction.atomic():
        hold = (
            LegalHold.objects.select_for_update()
            .select_related("tenant")
            .filter(pk=hold_id, released_at__isnull=True)
            .first()
        )
        if hold is None:
            raise HoldError(f"no active legal hold #{hold_id}")
        hold.released_at = timezone.now()
        hold.released_by = actor.display
        hold.release_reason = reason
        hold.save(update_fields=["released_at", "released_by", "release_reason"])
        record(
            action=RELEASED,
            actor=actor,
            tenant_id=hold.tenant_id,
            tenant_slug=hold.tenant.slug,
            task_id=hold.task_id,
            data={"hold": hold.pk, "scope": "task" if hold.task_id else "tenant", "reason": reason},
        )
    return hold


def active() -> Q:
    return Q(released_at__isnull=True)


def tenant_hold(tenant_id: int) -> LegalHold | None:
    """The oldest active hold on the whole tenant, if any."""
    return (
        LegalHold.objects.filter(active(), tenant_id=tenant_id, task_id="").order_by("pk").first()
    )


def first_held_seq(chain: str, tenant_id: int) -> tuple[int, int] | None:
    """``(seq, hold id)`` of the earliest event in ``chain`` of a task on hold, if any."""
    held = dict(
        LegalHold.objects.filter(active(), tenant_id=tenant_id)
        .exclude(task_id="")
        .values_list("task_id", "pk")
    )
    if not held:
        return None
    first = (
        AuditEvent.objects.filter(chain=chain, task_id__in=list(held), seq__isnull=False)
        .order_by("seq")
        .values_list("seq", "task_id")
        .first()
    )
    return None if first is None or first[0] is None else (first[0], held[first[1]])


def task_is_held(tenant_id: int, task_id: str) -> bool:
    """Whether TTL deletion of this task must wait (a hold on it or on its tenant)."""
    return (
        LegalHold.objects.filter(active(), tenant_id=tenant_id)
        .filter(Q(task_id="") | Q(task_id=task_id))
        .exists()
    )


def held_tasks_q() -> Q:
    """Tasks (``mcptasks.Task`` rows) a hold covers, for excluding them from deletion sweeps."""
    holds = LegalHold.objects.filter(active())
    return Q(tenant_id__in=holds.filter(task_id="").values("tenant_id")) | Q(
        pk__in=holds.exclude(task_id="").values("task_id")
    )
