"""Sending the outbox: claim a delivery, send it through its destination's sink, record how it
went. At least once, in order per ordering key (a task's events; a destination's audit stream).

- A worker **claims** a delivery with one conditional UPDATE (pending and due, or delivering
  with a lapsed lease; and no earlier row of its ordering key still open), which bumps
  ``attempts`` — the fencing token every later write of that attempt checks — and sets a lease
  judged by the database clock. A worker killed mid-send leaves the row ``delivering``; once the
  lease lapses, the sweep (or the next job) claims it again: sent again, never lost.
- A failed send is retried with exponential backoff and jitter; a delivery still failing
  ``MCPTASKS_OUTBOX_DEAD_AFTER_S`` after it was written (or redelivered), or refused for good
  by the receiver (``DeliveryError(retryable=False)``), is **dead**: it no longer blocks its
  ordering key, and an admin may redeliver it.
"""

from __future__ import annotations

import logging
import os
import random
import socket
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import DateTimeField, Exists, ExpressionWrapper, F, Min, OuterRef, Q, Value
from django.db.models.functions import Now
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from audit.record import Actor, record
from mcptasks import events, metrics, sinks
from mcptasks.outbox import crypto, writer
from mcptasks.outbox.models import Delivery, DeliveryState, Destination
from mcptasks.outbox.subscriptions import AUDIT

log = logging.getLogger(__name__)
D = DeliveryState
OPEN_STATES = (D.PENDING, D.DELIVERING)
BATCH = 200
# Deliveries to send after one, inline, in the same job (a burst of a task's events).
FOLLOW_ON = 100


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _lease_until() -> ExpressionWrapper:
    return ExpressionWrapper(
        Now() + Value(timedelta(seconds=settings.MCPTASKS_OUTBOX_LEASE_S)),
        output_field=DateTimeField(),
    )


def backoff_s(attempts: int) -> float:
    """Seconds before attempt ``attempts + 1``: exponential, capped, with equal jitter."""
    base = settings.MCPTASKS_OUTBOX_BACKOFF_BASE_S
    ceiling = settings.MCPTASKS_OUTBOX_BACKOFF_MAX_S
    delay = min(ceiling, base * (2 ** max(0, attempts - 1)))
    return delay / 2 + random.uniform(0, delay / 2)


def claim(delivery_id: int, worker: str) -> Delivery | None:
    """Take one delivery for an attempt, or None (not due, held, blocked by an earlier open
    row of its ordering key, or already done)."""
    earlier_open = Delivery.objects.filter(
        destination_id=OuterRef("destination_id"),
        ordering_key=OuterRef("ordering_key"),
        id__lt=OuterRef("id"),
        state__in=OPEN_STATES,
    )
    due = Q(state=D.PENDING, next_attempt_at__lte=timezone.now()) | Q(
        state=D.DELIVERING, lease_expires_at__lt=Now()
    )
    enabled = Destination.objects.filter(pk=OuterRef("destination_id"), enabled=True)
    # Only correlated subqueries, no join: Django then writes one plain UPDATE … WHERE, whose
    # conditions PostgreSQL re-checks on the row it waited for, so two workers never both
    # claim it (a join would become "pk IN (subquery)", evaluated once, before the wait).
    claimed = (
        Delivery.objects.filter(pk=delivery_id)
        .filter(Exists(enabled))
        .filter(due)
        .filter(~Exists(earlier_open))
        .update(
            state=D.DELIVERING,
            attempts=F("attempts") + 1,
            lease_owner=worker[:100],
            lease_expires_at=_lease_until(),
        )
    )
    if claimed != 1:
        return None
    return Delivery.objects.select_related("destination", "destination__tenant").get(pk=delivery_id)


def _messages(row: Delivery) -> list[sinks.Message]:
    found = []
    for item in row.messages:
        stamp = parse_datetime(str(item.get("timestamp", ""))) or row.created_at
        found.append(
            sinks.Message(
                id=str(item["id"]),
                type=str(item["type"]),
                timestamp=stamp,
                tenant=str(item.get("tenant", "")),
                data=item.get("data") or {},
                url=item.get("url"),
                recipients=tuple(item.get("recipients") or ()),
            )
        )
    return found


def send(row: Delivery) -> tuple[bool, str, bool]:
    """Send a claimed delivery: ``(delivered, reason, retryable)``. Never raises."""
    destination = row.destination
    try:
        sink = sinks.get(destination.kind)
    except KeyError:
        return False, f"this build has no sink of kind {destination.kind!r}", True
    try:
        secret = crypto.decrypt(destination.secret_encrypted)
    except crypto.SecretUnreadable as exc:
        return False, f"{exc}; set it again", True
    try:
        sink.send(
            destination.config,
            secret,
            _messages(row),
            timeout=settings.MCPTASKS_OUTBOX_SEND_TIMEOUT_S,
        )
    except sinks.DeliveryError as exc:
        return False, exc.reason[:500], exc.retryable
    except Exception as exc:
        # The exception's text may quote a payload or a secret: only its class is recorded.
        log.warning(
            "sink raised unexpectedly",
            extra={"kind": destination.kind, "delivery_id": row.pk, "error": type(exc).__name__},
        )
        return (
            False,
            f"unexpected error in the {destination.kind} sink ({type(exc).__name__})",
            True,
        )
    return True, "", True


def _finish(row: Delivery, delivered: bool, reason: str, retryable: bool) -> str:
    """Record the attempt's outcome (fenced by its attempt number); the new state."""
    now = timezone.now()
    kind = row.destination.kind
    mine = Delivery.objects.filter(pk=row.pk, state=D.DELIVERING, attempts=row.attempts)
    cleared: dict[str, Any] = {"lease_owner": "", "lease_expires_at": None}
    if delivered:
        if mine.update(state=D.DELIVERED, delivered_at=now, last_error="", **cleared) == 1:
            metrics.OUTBOX_DELIVERED.labels(kind=kind).inc()
            metrics.OUTBOX_DELIVERY_SECONDS.labels(kind=kind).observe(
                max(0.0, (now - row.created_at).total_seconds())
            )
        return D.DELIVERED
    metrics.OUTBOX_FAILURES.labels(kind=kind).inc()
    started = row.redelivered_at or row.created_at
    horizon = started + timedelta(seconds=settings.MCPTASKS_OUTBOX_DEAD_AFTER_S)
    next_at = now + timedelta(seconds=backoff_s(row.attempts))
    if not retryable or next_at > horizon:
        if mine.update(state=D.DEAD, dead_at=now, last_error=reason, **cleared) == 1:
            metrics.OUTBOX_DEAD.labels(kind=kind).inc()
            log.warning(
                "delivery dead-lettered",
                extra={"delivery_id": row.pk, "kind": kind, "reason": reason},
            )
        return D.DEAD
    mine.update(state=D.PENDING, next_attempt_at=next_at, last_error=reason, **cleared)
    if (next_at - now).total_seconds() <= settings.MCPTASKS_TIMER_ETA_MAX_S:
        events.dispatch_job("deliver_outbox", {"delivery_id": row.pk}, eta=next_at)
    return D.PENDING


def deliver(delivery_id: int, worker: str | None = None) -> str:
    """Claim, send and record one delivery, then the following rows of its ordering key that
    are due; returns what became of the first ("" when it could not be claimed)."""
    worker = worker or worker_name()
    first = ""
    current: int | None = delivery_id
    for _ in range(FOLLOW_ON):
        if current is None:
            break
        row = claim(current, worker)
        if row is None:
            break
        outcome = _finish(row, *send(row))
        first = first or outcome
        if outcome == D.PENDING:
            break  # it waits for its retry; later rows of its key wait behind it
        current = (
            Delivery.objects.filter(
                destination_id=row.destination_id,
                ordering_key=row.ordering_key,
                id__gt=row.pk,
                state=D.PENDING,
            )
            .order_by("id")
            .values_list("pk", flat=True)
            .first()
        )
    return first


def stream_audit(destination_id: int, worker: str | None = None, max_rounds: int = 50) -> int:
    """Deliver the destination's audit stream: open batches first, then new events in chain
    order, a batch at a time; returns the batches delivered."""
    worker = worker or worker_name()
    destination = Destination.objects.filter(pk=destination_id, enabled=True).first()
    if destination is None or AUDIT not in (destination.events or ()):
        return 0
    try:
        max_batch = min(sinks.get(destination.kind).max_batch, settings.MCPTASKS_OUTBOX_AUDIT_BATCH)
    except KeyError:
        max_batch = 1
    delivered = 0
    for _ in range(max_rounds):
        head = (
            Delivery.objects.filter(
                destination_id=destination_id, ordering_key="audit", state__in=OPEN_STATES
            )
            .order_by("id")
            .first()
        )
        if head is None:
            head = writer.take_audit_batch(destination_id, max_batch)
            if head is None:
                break
        if deliver(head.pk, worker) != D.DELIVERED:
            break
        delivered += 1
    return delivered


# ---------------------------------------------------------------- redeliver
class NotDead(Exception):
    """Only a dead-lettered delivery may be redelivered."""


def redeliver(*, delivery: Delivery, user: Any, actor: Actor, reason: str = "") -> Delivery:
    """Send a dead-lettered delivery again (its ordering key waits for it); audited as
    ``destination.redelivered``. The caller authorized it (access.may_manage_destinations)."""
    with transaction.atomic():
        now = timezone.now()
        if (
            Delivery.objects.filter(pk=delivery.pk, state=D.DEAD).update(
                state=D.PENDING,
                next_attempt_at=now,
                dead_at=None,
                redelivered_by=user,
                redelivered_at=now,
            )
            != 1
        ):
            raise NotDead("only a dead-lettered delivery may be redelivered")
        destination = delivery.destination
        record(
            action="destination.redelivered",
            actor=actor,
            tenant_id=destination.tenant_id,
            tenant_slug=destination.tenant.slug,
            task_id=delivery.task_id,
            data={
                "destination_id": destination.pk,
                "destination": destination.name,
                "delivery_id": delivery.pk,
                "event_id": delivery.event_id,
                "event_type": delivery.event_type,
                "reason": reason,
            },
        )
        if delivery.ordering_key == "audit":
            events.enqueue_on_commit("stream_audit", destination_id=destination.pk)
        else:
            events.enqueue_on_commit("deliver_outbox", delivery_id=delivery.pk)
    delivery.refresh_from_db()
    return delivery


# ---------------------------------------------------------------- sweep
def sweep(grace_s: float = 5.0) -> int:
    """Wake what the broker may have lost: due deliveries (pending past their time by
    ``grace_s``, or held by a lapsed lease), and audit streams behind their chain's head.
    Returns the jobs dispatched."""
    from audit.chain import chain_for_tenant
    from audit.models import ChainHead

    cutoff: datetime = timezone.now() - timedelta(seconds=grace_s)
    due = (
        Delivery.objects.filter(destination__enabled=True)
        .filter(
            Q(state=D.PENDING, next_attempt_at__lte=cutoff)
            | Q(state=D.DELIVERING, lease_expires_at__lt=Now())
        )
        .exclude(ordering_key="audit")
        .values("destination_id", "ordering_key")
        .annotate(first=Min("id"))
        .order_by("first")[:BATCH]
    )
    dispatched = 0
    for row in due:
        events.dispatch_job("deliver_outbox", {"delivery_id": row["first"]})
        dispatched += 1
    streams = [
        (pk, tenant_slug, cursor)
        for pk, tenant_slug, cursor, subscribed in Destination.objects.filter(
            enabled=True
        ).values_list("pk", "tenant__slug", "audit_cursor", "events")
        if AUDIT in (subscribed or ())
    ]
    if not streams:
        return dispatched
    heads = dict(
        ChainHead.objects.filter(
            chain__in={chain_for_tenant(slug) for _, slug, _ in streams}
        ).values_list("chain", "seq")
    )
    open_audit = set(
        Delivery.objects.filter(
            destination_id__in=[pk for pk, _, _ in streams],
            ordering_key="audit",
        )
        .filter(
            Q(state=D.PENDING, next_attempt_at__lte=cutoff)
            | Q(state=D.DELIVERING, lease_expires_at__lt=Now())
        )
        .values_list("destination_id", flat=True)
    )
    waiting = (
        set(
            Delivery.objects.filter(
                destination_id__in=[pk for pk, _, _ in streams],
                ordering_key="audit",
                state__in=OPEN_STATES,
            ).values_list("destination_id", flat=True)
        )
        - open_audit
    )  # a batch waits for its retry: the stream waits behind it
    for pk, slug, cursor in streams:
        if pk in waiting:
            continue
        if pk in open_audit or heads.get(chain_for_tenant(slug), 0) > cursor:
            events.dispatch_job("stream_audit", {"destination_id": pk})
            dispatched += 1
    return dispatched
