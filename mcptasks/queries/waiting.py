"""The inbox: what waits on one user (input requests to answer, effects to reconcile, cancels
that did not take), listed or counted per tenant — a bounded number of queries whatever the rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from mcptasks import access
from mcptasks.models import Effect, InputKind, InputRequest, Task, TaskState
from mcptasks.plans import written
from mcptasks.queries.listing import LIST_DEFERRED

# A cancel requested this long ago on a task that still runs lands in the operator's inbox.
STUCK_CANCEL_S = settings.MCPTASKS_STUCK_CANCEL_S


@dataclass
class Inbox:
    """Everything waiting on one user: at most :data:`INBOX_LIMIT` of each kind, oldest first;
    ``more`` names the kinds that have more."""

    inputs: list[InputRequest] = field(default_factory=list)
    unknown_effects: list[Effect] = field(default_factory=list)
    stuck_cancels: list[Task] = field(default_factory=list)
    more: frozenset[str] = frozenset()

    @property
    def total(self) -> int:
        return len(self.inputs) + len(self.unknown_effects) + len(self.stuck_cancels)


@dataclass(frozen=True)
class InboxCounts:
    inputs: int
    unknown_effects: int
    stuck_cancels: int

    @property
    def total(self) -> int:
        return self.inputs + self.unknown_effects + self.stuck_cancels


INBOX_LIMIT = 50


def _stuck_cancels(user: Any, now: datetime | None, tenant_id: int | None) -> QuerySet[Task]:
    """Running tasks whose cancel intent is older than the threshold (a task in any other
    state is cancelled at once when intent is recorded, so only running ones can linger)."""
    threshold = (now or timezone.now()) - timedelta(seconds=STUCK_CANCEL_S)
    return _in_tenant(
        access.visible_tasks(user, action=access.Action.FORCE_CANCEL).filter(
            state=written(TaskState.RUNNING), cancel_requested_at__lt=threshold
        ),
        tenant_id,
    )


def _in_tenant(rows: QuerySet[Any], tenant_id: int | None) -> QuerySet[Any]:
    """``rows`` of one tenant, or all of them (``tenant_id`` None): the dashboard's scope."""
    return rows if tenant_id is None else rows.filter(tenant_id=tenant_id)


def inbox(user: Any, *, tenant_id: int | None = None, now: datetime | None = None) -> Inbox:
    """Input requests ``user`` may answer, unknown effects they may reconcile, and tasks whose
    requested cancel has not taken effect within :data:`STUCK_CANCEL_S` — in one tenant, or
    every tenant (``tenant_id`` None) — three queries."""
    inputs = list(
        _in_tenant(access.answerable_inputs(user), tenant_id)
        .select_related("task", "task__principal", "tenant")
        .defer(*(f"task__{name}" for name in LIST_DEFERRED))
        .order_by("created_at", "pk")[: INBOX_LIMIT + 1]
    )
    effects = list(
        _in_tenant(access.reconcilable_effects(user), tenant_id)
        .select_related("task", "task__principal", "tenant")
        .defer("result", *(f"task__{name}" for name in LIST_DEFERRED))
        .order_by("updated_at", "pk")[: INBOX_LIMIT + 1]
    )
    stuck = list(
        _stuck_cancels(user, now, tenant_id)
        .select_related("tenant", "principal", "cancel_requested_by")
        .defer(*LIST_DEFERRED)
        .order_by("cancel_requested_at")[: INBOX_LIMIT + 1]
    )
    found = {"inputs": inputs, "unknown_effects": effects, "stuck_cancels": stuck}
    return Inbox(
        inputs=inputs[:INBOX_LIMIT],
        unknown_effects=effects[:INBOX_LIMIT],
        stuck_cancels=stuck[:INBOX_LIMIT],
        more=frozenset(kind for kind, rows in found.items() if len(rows) > INBOX_LIMIT),
    )


def _answerable_per_tenant(user: Any) -> dict[int, int]:
    """access.answerable_inputs counted per tenant in one grouped query that also counts the
    approval gates among them; only when there are any are they read and checked against their
    policies (a second query): no page pays for gates that are not there."""
    pending = access.answerable_inputs_before_gates(user)
    grouped = (
        pending.order_by()
        .values("tenant_id")
        .annotate(n=Count("pk"), gates=Count("pk", filter=Q(kind=InputKind.APPROVAL)))
    )
    counts = {row["tenant_id"]: row["n"] for row in grouped if row["n"]}
    if any(row["gates"] for row in grouped):
        for gate in access.refused_gates(user, pending):
            counts[gate.tenant_id] -= 1
    return {tenant_id: n for tenant_id, n in counts.items() if n}


def inbox_counts_by_tenant(user: Any, *, now: datetime | None = None) -> dict[int, InboxCounts]:
    """How much waits on ``user`` (what :func:`inbox` lists, counted) in each tenant with
    anything waiting: three grouped queries, for the navigation's badge and the inbox's "more
    in your other tenants"."""

    def per_tenant(rows: QuerySet[Any]) -> dict[int, int]:
        grouped = rows.order_by().values("tenant_id").annotate(n=Count("pk"))
        return {row["tenant_id"]: row["n"] for row in grouped}

    inputs = _answerable_per_tenant(user)
    effects = per_tenant(access.reconcilable_effects(user))
    stuck = per_tenant(_stuck_cancels(user, now, None))
    return {
        tenant_id: InboxCounts(
            inputs=inputs.get(tenant_id, 0),
            unknown_effects=effects.get(tenant_id, 0),
            stuck_cancels=stuck.get(tenant_id, 0),
        )
        for tenant_id in {*inputs, *effects, *stuck}
    }
