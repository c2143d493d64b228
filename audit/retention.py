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

On PostgreSQL the events are partitioned by month (:mod:`audit.partitions`), and
:func:`purge_due` first drops whole partitions where it can (:func:`_drop_due_partitions`): a
partition every event of which is past retention for its chain — every chain in it is a
tenant's with a policy whose cutoff is after the partition's upper bound, under no legal hold,
intact, sealed, and the partition holds a prefix of what is left of it (no straggler with a
lower seq in another partition). For each chain it records the checkpoint and the
``audit.purged`` event the row path records (its data also names the partition), in the
transaction that detaches and drops the partition through the ``SECURITY DEFINER`` function
``audit_drop_partition`` (migration 0008), so a crash leaves either all of it or none. The
system chain has no retention, so a partition holding a system event is never dropped. What no
partition drop covers is purged row by row as before.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import DatabaseError, connection, transaction
from django.db.models import Count, Max, Q
from django.utils import timezone

from audit import holds, partitions
from audit.chain import PURGED_ACTION, chain_for_tenant, latest_checkpoint, verify_chain
from audit.models import AuditEvent, ChainHead, RetentionCheckpoint, RetentionPolicy
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
    partition: str | None = None  # the partition dropped, when the purge dropped one


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
    now = now or timezone.now()
    policies = list(
        RetentionPolicy.objects.order_by("tenant__slug").values_list(
            "tenant_id", "tenant__slug", "keep_days"
        )
    )
    results = _drop_due_partitions(policies, actor=actor, now=now)
    for _, slug, days in policies:
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
        return _checkpoint(
            chain=chain,
            tenant_id=tenant_id,
            tenant_slug=tenant_slug,
            last_seq=last_seq,
            last_hash=last_hash,
            purged=purged,
            cutoff=cutoff,
            older_than_days=older_than_days,
            actor=actor,
            held_by=held_by,
        )


def _checkpoint(
    *,
    chain: str,
    tenant_id: int | None,
    tenant_slug: str | None,
    last_seq: int,
    last_hash: str,
    purged: int,
    cutoff: datetime,
    older_than_days: int,
    actor: Actor,
    held_by: int | None = None,
    partition: str | None = None,
) -> PurgeResult:
    """After a purge of ``chain`` up to ``last_seq`` (stopped by the task hold ``held_by``, or
    by dropping ``partition``), in its transaction: the checkpoint, and the ``audit.purged``
    event that attests it."""
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
            **({"partition": partition} if partition is not None else {}),
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
        partition=partition,
    )


def _delete_prefix(chain: str, last_seq: int, cutoff: datetime) -> int:
    """Delete the events of ``chain`` up to ``last_seq``; how many were deleted."""
    if connection.vendor != "postgresql":
        deleted, _ = AuditEvent.objects.filter(chain=chain, seq__lte=last_seq).delete()
        return deleted
    with connection.cursor() as cursor:
        cursor.execute("SELECT audit_purge_prefix(%s, %s, %s)", [chain, last_seq, cutoff])
        return int(cursor.fetchone()[0])


# ---------------------------------------------------------------- whole partitions
@dataclass(frozen=True)
class _Span:
    """A chain's events in a partition that retention may drop whole."""

    tenant_id: int
    tenant_slug: str
    keep_days: int
    cutoff: datetime
    last_seq: int


def _in(part: partitions.Partition) -> Q:
    inside = Q(created_at__lt=part.upper)
    return inside & Q(created_at__gte=part.lower) if part.lower is not None else inside


def _outside(part: partitions.Partition) -> Q:
    outside = Q(created_at__gte=part.upper)
    return outside | Q(created_at__lt=part.lower) if part.lower is not None else outside


def _drop_due_partitions(
    policies: list[tuple[int, str, int]], *, actor: Actor, now: datetime
) -> list[PurgeResult]:
    """Drop, oldest first, every partition all of whose events are past retention (the module
    docstring); one result per chain of each partition dropped. A partition that cannot be
    dropped is left to the row path."""
    if not partitions.partitioned():
        return []
    keep = {chain_for_tenant(slug): (tenant_id, slug, days) for tenant_id, slug, days in policies}
    if not keep:
        return []
    oldest_cutoff = now - timedelta(days=min(days for _, _, days in policies))
    results: list[PurgeResult] = []
    for part in partitions.partitions():
        if part.upper is None or part.upper > oldest_cutoff:
            continue  # the DEFAULT partition, or one too young for any policy
        spans = _droppable(part, keep, now)
        if not spans:
            continue
        try:
            results.extend(_drop(part, spans, actor))
        except (DatabaseError, RetentionRefused) as exc:  # refused, or the table stayed busy
            log.warning("audit retention kept partition %s: %s", part.name, exc)
    return results


def _droppable(
    part: partitions.Partition, keep: dict[str, tuple[int, str, int]], now: datetime
) -> dict[str, _Span] | None:
    """Each chain of ``part`` with its span, if the whole partition may be dropped."""
    if part.upper is None:
        return None
    upper = part.upper
    events = AuditEvent.objects.filter(_in(part))
    # Index probes first: a chain without retention (the system chain, a tenant with no
    # policy) in the partition keeps it, and the full count below is not needed.
    others = set(ChainHead.objects.values_list("chain", flat=True)) - set(keep)
    if any(events.filter(chain=chain).exists() for chain in sorted(others)):
        return None
    seal_chains(sorted(set(events.filter(seq__isnull=True).values_list("chain", flat=True))))
    rows = events.values("chain").annotate(n=Count("id"), sealed=Count("seq"), last=Max("seq"))
    spans = {}
    for row in rows.order_by("chain"):
        chain, policy = row["chain"], keep.get(row["chain"])
        if policy is None or row["sealed"] != row["n"]:
            return None
        tenant_id, slug, days = policy
        cutoff = now - timedelta(days=days)
        if cutoff < upper or holds.tenant_hold(tenant_id) is not None:
            return None
        held = holds.first_held_seq(chain, tenant_id)
        if held is not None and held[0] <= row["last"]:
            return None
        # Seq follows id at seal time, not created_at: a straggler of the chain at or before
        # the partition's last seq in a later partition means the partition is no prefix.
        if AuditEvent.objects.filter(_outside(part), chain=chain, seq__lte=row["last"]).exists():
            return None
        spans[chain] = _Span(tenant_id, slug, days, cutoff, row["last"])
    for chain in spans:
        broken = verify_chain(chain).broken
        if broken is not None:
            log.error(
                "audit retention refused for partition %s: broken chain %s", part.name, broken
            )
            return None
    return spans


def _drop(part: partitions.Partition, spans: dict[str, _Span], actor: Actor) -> list[PurgeResult]:
    """Drop ``part`` and record each chain's checkpoint and ``audit.purged``, atomically."""
    with transaction.atomic():
        # The chains' heads first, then the table (DETACH locks it): the writers' order.
        list(
            ChainHead.objects.select_for_update()
            .filter(chain__in=list(spans))
            .order_by("chain")
            .values_list("chain", flat=True)
        )
        last = Q(*[Q(chain=c, seq=span.last_seq) for c, span in spans.items()], _connector=Q.OR)
        hashes = {
            chain: digest
            for chain, digest in AuditEvent.objects.filter(last).values_list("chain", "hash")
            if digest is not None
        }
        if len(hashes) != len(spans):  # cannot be: the spans' events are sealed
            raise RetentionRefused(f"{part.name}: a chain's last event has no hash")
        purged = partitions.drop_partition(
            part.name, {chain: (span.last_seq, span.cutoff) for chain, span in spans.items()}
        )
        return [
            _checkpoint(
                chain=chain,
                tenant_id=span.tenant_id,
                tenant_slug=span.tenant_slug,
                last_seq=span.last_seq,
                last_hash=hashes[chain],
                purged=purged.get(chain, 0),
                cutoff=span.cutoff,
                older_than_days=span.keep_days,
                actor=actor,
                partition=part.name,
            )
            for chain, span in spans.items()
        ]
