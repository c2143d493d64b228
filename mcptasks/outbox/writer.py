"""Outbox rows, written in the transaction of the change they announce.

Task events come from lifecycle: its one audit helper calls :func:`task_event` with the action
it records, in the same transaction (so a rolled-back change announces nothing, and nothing is
sent before commit: the delivery job is enqueued on commit). One :class:`Delivery` is written
per destination that subscribes to the event type and whose owner may see the task; its
message is the task as that owner sees it (``wire.detailed_task``'s redacted form), redacted
again as a whole (audit/redact.py).

The audit stream needs no rows of its own at write time: the tenant's audit chain *is* the
durable log (written in the transaction of every change by construction, in chain order). A
destination keeps a cursor into it; :func:`take_audit_batch` moves the cursor and writes the
next batch as one Delivery in one transaction, so a batch is taken once and kept until sent.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from audit import seal as audit_seal
from audit.redact import redact
from mcptasks import events
from mcptasks.outbox import subscriptions
from mcptasks.outbox.models import Delivery, Destination
from mcptasks.outbox.subscriptions import AUDIT

log = logging.getLogger(__name__)

# Audit actions of lifecycle that move a task to another (non-terminal) state.
STATUS_ACTIONS = frozenset(
    {
        "task.started",
        "task.requeued",
        "task.sleeping",
        "task.woken",
        "task.input_answered",
        "task.input_timed_out",
        "approval.gate_opened",
        "effect.reconciled",
    }
)
ENDING_ACTIONS = frozenset(
    {"task.completed", "task.failed", "task.expired", "task.cancelled", "task.force_cancelled"}
)
TERMINAL_EVENTS = {
    "completed": "task.completed",
    "failed": "task.failed",
    "cancelled": "task.cancelled",
}
PAYLOAD_MAX_BYTES = 262_144


def event_type_of(task: Any, action: str, data: dict[str, Any]) -> str | None:
    """The task event an audited lifecycle action announces, or None."""
    if action == "task.created":
        return "task.created"
    if action == "task.input_requested":
        return "task.input_requested"
    if action in ("approval.approved", "approval.rejected"):
        return "approval.decided"
    if action in ENDING_ACTIONS:
        return TERMINAL_EVENTS.get(task.state)
    if action in STATUS_ACTIONS:
        if task.state in TERMINAL_EVENTS:
            # An input timeout or a reconciliation that failed the task ends it; deciding an
            # effect of a task that had already ended records history and announces nothing.
            if action == "effect.reconciled" and data.get("decision") != "fail":
                return None
            return TERMINAL_EVENTS[task.state]
        return "task.status_changed"
    return None


def new_event_id() -> str:
    return f"evt_{uuid.uuid4().hex}"


def task_event(task: Any, action: str, data: dict[str, Any] | None = None, *, by: str = "") -> None:
    """Announce the task event that the audited ``action`` of lifecycle stands for, to the
    tenant's subscribed destinations (nothing, at the cost of a dictionary lookup, when the
    tenant has none). Called inside the writing transaction."""
    subs = subscriptions.for_tenant(task.tenant_id)
    if not subs.types:
        return
    data = data or {}
    if subs.wants(AUDIT):
        _wake_audit_streams_on_commit(task.tenant_id)
    event_type = event_type_of(task, action, data)
    if event_type is None:
        return
    if subs.wants(event_type):
        _write(
            task,
            event_type,
            extra=_approval_decided(action, data, by)
            if event_type.startswith("approval")
            else None,
        )
    if event_type == "task.input_requested" and subs.wants("approval.requested"):
        keys = [r.get("key") for r in data.get("requests") or [] if isinstance(r, dict)]
        _approvals_requested(task, keys)


def _destinations(tenant_id: int, event_type: str) -> list[Destination]:
    rows = Destination.objects.filter(tenant_id=tenant_id, enabled=True).select_related("owner")
    return [d for d in rows if event_type in (d.events or ())]


def _task_view(task: Any, owner: Any) -> dict[str, Any] | None:
    """The task as ``owner`` may see it (redacted), or None when they may not see it."""
    from mcptasks import access, wire
    from mcptasks.models import InputState

    try:
        access.task_for(owner, task.pk, lookup=False)
    except access.TaskHidden:
        return None
    pending = list(
        task.input_requests.filter(state=InputState.PENDING).order_by("created_at", "id")
    )
    return {
        "task": wire.detailed_task(task, pending, owner_view=False),
        "tool": task.tool_name,
        "state": task.state,
        "outcome": task.outcome,
        "version": task.version,
        "dashboard_url": absolute_url(reverse("dashboard:task", args=[task.pk])),
    }


def absolute_url(path: str) -> str:
    return f"{settings.MCPTASKS_PUBLIC_URL}{path}"


def _write(
    task: Any,
    event_type: str,
    *,
    extra: dict[str, Any] | None = None,
    url: str | None = None,
    recipients: tuple[str, ...] = (),
    event_id: str | None = None,
) -> list[Delivery]:
    from mcptasks import wire

    event_id = event_id or new_event_id()
    now = timezone.now()
    sensitive = wire.sensitive_keys_of(task.tool_name)
    views: dict[int, dict[str, Any] | None] = {}
    rows = []
    for destination in _destinations(task.tenant_id, event_type):
        owner = destination.owner
        if owner.pk not in views:
            views[owner.pk] = _task_view(task, owner)
        view = views[owner.pk]
        if view is None:
            continue  # the owner may not see this task: neither may the destination
        payload = redact(
            {**view, **(extra or {})}, sensitive_keys=sensitive, max_bytes=PAYLOAD_MAX_BYTES
        )
        message = {
            "id": event_id,
            "type": event_type,
            "timestamp": now.isoformat(),
            "tenant": task.tenant.slug,
            "data": payload,
            "url": url,
            "recipients": list(recipients),
        }
        rows.append(
            Delivery(
                destination=destination,
                tenant_id=task.tenant_id,
                event_id=event_id,
                event_type=event_type,
                task_id=task.pk,
                ordering_key=f"task:{task.pk}",
                messages=[message],
                created_at=now,
                next_attempt_at=now,
            )
        )
    if not rows:
        return []
    created = Delivery.objects.bulk_create(rows)
    ids = [row.pk for row in created if row.pk is not None]
    if len(ids) != len(created):  # a backend that returns no ids (none of ours, but be exact)
        ids = list(Delivery.objects.filter(event_id=event_id).values_list("pk", flat=True))
    for delivery_id in ids:
        events.enqueue_on_commit("deliver_outbox", delivery_id=delivery_id)
    return created


def _approval_decided(action: str, data: dict[str, Any], by: str) -> dict[str, Any]:
    return {
        "approval": {
            "key": data.get("key", ""),
            "decision": "approved" if action == "approval.approved" else "rejected",
            "reviewer": by,
            "via": data.get("via", ""),
            "comment": data.get("comment", ""),
            "approvals": data.get("approvals"),
            "required": data.get("required"),
        }
    }


def _approvals_requested(task: Any, keys: list[Any]) -> None:
    """``approval.requested`` for each approval gate the task just opened: the message links
    to the approval page and names the eligible reviewers' e-mail addresses."""
    from mcptasks import access, wire
    from mcptasks.models import InputKind, InputRequest, InputState

    gates = InputRequest.objects.filter(
        task_id=task.pk,
        key__in=[k for k in keys if isinstance(k, str)],
        kind=InputKind.APPROVAL,
        state=InputState.PENDING,
    )
    sensitive = wire.sensitive_keys_of(task.tool_name)
    for gate in gates:
        reviewers = access.eligible_reviewers(gate, task)
        recipients = tuple(sorted({u.email for u in reviewers if u.email}))
        policy = access.gate_policy(gate)
        extra = {
            "approval": {
                "key": gate.key,
                "message": str((gate.params or {}).get("message", "")),
                "summary": wire.shown((gate.gate or {}).get("summary") or {}, sensitive),
                "required": policy.get("required", 1),
                "reviewers": sorted(u.get_username() for u in reviewers),
                "deadline_at": gate.deadline_at.isoformat() if gate.deadline_at else None,
            }
        }
        _write(
            task,
            "approval.requested",
            extra=extra,
            url=absolute_url(reverse("dashboard:answer", args=[task.pk, gate.key])),
            recipients=recipients,
        )


# ---------------------------------------------------------------- the audit stream
def _wake_audit_streams_on_commit(tenant_id: int) -> None:
    """After commit, the tenant's audit streams take the new events (the sweep would too)."""
    transaction.on_commit(lambda: _wake_audit_streams(tenant_id))


def _wake_audit_streams(tenant_id: int) -> None:
    for destination_id in Destination.objects.filter(tenant_id=tenant_id, enabled=True).values_list(
        "pk", "events"
    ):
        if AUDIT in (destination_id[1] or ()):
            events.dispatch_job("stream_audit", {"destination_id": destination_id[0]})


def _on_sealed(sender: Any, *, tenant_id: int | None, **kwargs: Any) -> None:
    """Events sealed after their commit (audit/seal.py) reach the streams only now: a stream
    takes sealed events only (its cursor is a sequence number)."""
    if tenant_id is not None:
        _wake_audit_streams(tenant_id)


audit_seal.sealed.connect(_on_sealed, dispatch_uid="mcptasks.outbox.writer.on_sealed")


def audit_message(event: Any, tenant_slug: str) -> dict[str, Any]:
    """One audit event as a message: the event's hashed body (so a receiver can recompute
    ``hash = sha256(prev_hash || RFC 8785 JSON of body)``) and its chain links."""
    from audit.chain import body_of_event

    body = body_of_event(event)
    return {
        "id": f"audit:{event.chain}:{event.seq}",
        "type": "audit.event",
        "timestamp": event.created_at.isoformat(),
        "tenant": tenant_slug,
        "data": {
            "chain": event.chain,
            "sequence": event.seq,
            "prev_hash": event.prev_hash,
            "hash": event.hash,
            "event": body,
        },
        "url": None,
        "recipients": [],
    }


def audit_start(tenant_slug: str) -> int:
    """Where a new audit subscription starts: after the chain's current head (events from
    now on)."""
    from audit.chain import chain_for_tenant
    from audit.models import ChainHead

    head = ChainHead.objects.filter(chain=chain_for_tenant(tenant_slug)).values_list(
        "seq", flat=True
    )
    return int(head.first() or 0)


def take_audit_batch(destination_id: int, max_batch: int) -> Delivery | None:
    """Move the destination's cursor over the next audit events and write them as one
    delivery; None when there are none (or another worker took them first)."""
    from audit.chain import chain_for_tenant
    from audit.models import AuditEvent

    with transaction.atomic():
        destination = (
            Destination.objects.select_related("tenant")
            .filter(pk=destination_id, enabled=True)
            .first()
        )
        if destination is None or AUDIT not in (destination.events or ()):
            return None
        chain = chain_for_tenant(destination.tenant.slug)
        batch = list(
            AuditEvent.objects.filter(chain=chain, seq__gt=destination.audit_cursor).order_by(
                "seq"
            )[: max(1, max_batch)]
        )
        if not batch:
            return None
        moved = Destination.objects.filter(
            pk=destination.pk, audit_cursor=destination.audit_cursor
        ).update(audit_cursor=batch[-1].seq)
        if moved != 1:
            return None
        messages = [audit_message(event, destination.tenant.slug) for event in batch]
        now = timezone.now()
        return Delivery.objects.create(
            destination=destination,
            tenant_id=destination.tenant_id,
            event_id=messages[0]["id"],
            event_type="audit",
            ordering_key="audit",
            messages=messages,
            first_seq=batch[0].seq,
            last_seq=batch[-1].seq,
            created_at=now,
            next_attempt_at=now,
        )
