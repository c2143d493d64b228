"""Retention: the one path that deletes audit events (DESIGN §7).

A purge removes the oldest events of one chain — always a prefix, so the rest still verifies —
after checking that the chain is intact (purging a broken chain would destroy the evidence). In
one transaction it deletes the events, stores a :class:`~audit.models.RetentionCheckpoint` (the
last purged sequence and its hash, where verification restarts) and records ``audit.purged`` in
the same chain with that checkpoint in its data. On PostgreSQL the DELETE is the function
``audit_purge_prefix`` (migration 0004): it runs with the table owner's rights, so the
application's role needs no DELETE on audit rows, deletes only a prefix of events older than the
cutoff, and sets ``mcptasks.audit_retention`` locally (the only way past the append-only trigger)
around its own DELETE alone. Only sealed events are purged: the chain is sealed first, and the
``audit.purged`` event is sealed as it is recorded (audit/seal.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from audit import holds
from audit.chain import PURGED_ACTION, chain_for_tenant, latest_checkpoint, verify_chain
from audit.models import AuditEvent, RetentionCheckpoint, RetentionPolicy
from audit.record import Actor, record
from audit.seal import seal_chains

log = logging.getLogger(__name__)


class RetentionRefused(Exception):
    """The purge was refused (a broken chain, an unknown tenant, a bad age); nothing changed."""


class RetentionHeld(RetentionRefused):
    """The tenant is under a legal hold (:mod:`audit.holds`); nothing changed."""


@dataclass(frozen=True)
class PurgeResult:
    """``purged`` events of ``chain`` deleted; the chain now starts after ``checkpoint_seq``."""

    chain: str
    purged: int
    checkpoint_seq: int
    checkpoint_hash: str
    event_seq: int | None  # the audit.purged event, None when nothing was old enough
    held_by: int | None = None  # a task hold that stopped the purge before its task's events


def purge_tenant(
    *, tenant_slug: str, older_than_days: int, actor: Actor, now: datetime | None = None
) -> PurgeResult:
    """Purge a tenant's audit events older than ``older_than_days`` (≥ 1) days.

    Raises :class:`RetentionRefused` for an unknown tenant, a bad age, or a broken chain, and
    :class:`RetentionHeld` while a legal hold covers the tenant. A hold on a task stops the
    purge before that task's first event.
    """
    from mcptasks.models import Tenant

    if older_than_days < 1:
        raise RetentionRefused("retention keeps at least one day of audit events")
    tenant = Tenant.objects.filter(slug=tenant_slug).first()
    if tenant is None:
        raise RetentionRefused(f"no tenant {tenant_slug!r}")
    hold = holds.tenant_hold(tenant.pk)
    if hold is not None:
        raise RetentionHeld(
            f"tenant {tenant.slug!r} is under legal hold #{hold.pk} (placed by "
            f"{hold.placed_by} on {hold.placed_at:%Y-%m-%d}: {hold.reason}); nothing purged"
        )
    cutoff = (now or timezone.now()) - timedelta(days=older_than_days)
    return _purge_chain(
        chain=chain_for_tenant(tenant.slug),
        tenant_id=tenant.pk,
        tenant_slug=tenant.slug,
        cutoff=cutoff,
        older_than_days=older_than_days,
        actor=actor,
    )


def purge_due(*, actor: Actor | None = None, now: datetime | None = None) -> list[PurgeResult]:
    """Apply every tenant's :class:`~audit.models.RetentionPolicy` (for the retention sweep).

    A refused tenant (a broken chain) is logged as an error and skipped; the others proceed.
    """
    actor = actor or Actor.system("retention")
    results = []
    for slug, days in RetentionPolicy.objects.order_by("tenant__slug").values_list(
        "tenant__slug", "keep_days"
    ):
        try:
            results.append(
                purge_tenant(tenant_slug=slug, older_than_days=days, actor=actor, now=now)
            )
        except RetentionHeld as exc:
            log.info("audit retention skipped for tenant %s: %s", slug, exc)
        except RetentionRefused as exc:
            log.error("audit retention refused for tenant %s: %s", slug, exc)
    return results


def _last_purgeable_seq(chain: str, cutoff: datetime) -> int:
    """The end of the prefix of events older than ``cutoff`` (0 if there is none)."""
    events = AuditEvent.objects.filter(chain=chain, seq__isnull=False)
    first_kept = (
        events.filter(created_at__gte=cutoff).order_by("seq").values_list("seq", flat=True).first()
    )
    if first_kept is not None:
        return first_kept - 1
    return events.order_by("-seq").values_list("seq", flat=True).first() or 0


def _purge_chain(
    *,
    chain: str,
    tenant_id: int | None,
    tenant_slug: str | None,
    cutoff: datetime,
    older_than_days: int,
    actor: Actor,
) -> PurgeResult:
    seal_chains([chain])  # only sealed events are purged, after the chain's earlier ones
    report = verify_chain(chain)
    if report.broken is not None:
        raise RetentionRefused(f"refusing to purge a broken chain: {report.broken}")
    with transaction.atomic():
        start_seq, start_hash = latest_checkpoint(chain)
        last_seq = _last_purgeable_seq(chain, cutoff)
        held = holds.first_held_seq(chain, tenant_id) if tenant_id is not None else None
        held_by = None
        if held is not None and held[0] <= last_seq:
            last_seq, held_by = held[0] - 1, held[1]
        if last_seq <= start_seq:
            return PurgeResult(
                chain=chain,
                purged=0,
                checkpoint_seq=start_seq,
                checkpoint_hash=start_hash,
                event_seq=None,
                held_by=held_by,
            )
        last_hash = AuditEvent.objects.values_list("hash", flat=True).get(chain=chain, seq=last_seq)
        if last_hash is None:  # cannot be: an event with a seq is sealed
            raise RetentionRefused(f"{chain} seq {last_seq} has no hash")
        purged = _delete_prefix(chain, last_seq, cutoff)
        RetentionCheckpoint.objects.create(
            chain=chain, seq=last_seq, hash=last_hash, purged=purged, cutoff=cutoff
        )
        event = record(
            action=PURGED_ACTION,
            actor=actor,
            tenant_id=tenant_id,
            tenant_slug=tenant_slug,
            data={
                "checkpoint": {"seq": last_seq, "hash": last_hash},
                "purged": purged,
                "older_than_days": older_than_days,
                "cutoff": cutoff.isoformat(),
                **({"stopped_by_hold": held_by} if held_by is not None else {}),
            },
            inline=True,  # the checkpoint it attests must be attested from the moment it exists
        )
    return PurgeResult(
        chain=chain,
        purged=purged,
        checkpoint_seq=last_seq,
        checkpoint_hash=last_hash,
        event_seq=event.seq,
        held_by=held_by,
    )


def _delete_prefix(chain: str, last_seq: int, cutoff: datetime) -> int:
    """Delete the events of ``chain`` up to ``last_seq``; how many were deleted."""
    if connection.vendor != "postgresql":
        deleted, _ = AuditEvent.objects.filter(chain=chain, seq__lte=last_seq).delete()
        return deleted
    with connection.cursor() as cursor:
        cursor.execute("SELECT audit_purge_prefix(%s, %s, %s)", [chain, last_seq, cutoff])
        return int(cursor.fetchone()[0])
