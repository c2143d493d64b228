"""Read-only selectors of the dashboard (STYLE rule 1: lifecycle writes, queries read).

Each selector takes the viewing user, asks ``access.py`` which rows they may see, and returns
plain rows or small dataclasses shaped for one page: a bounded number of queries whatever the
row count (the query-count tests in tests/dashboard/ hold them to it), and orderings that walk an
index (``task_tenant_created``, ``task_principal_created``, the audit primary key).
"""

from __future__ import annotations

import base64
import binascii
import heapq
import json
from dataclasses import dataclass, field, replace
from datetime import date, datetime, time, timedelta
from itertools import islice
from typing import Any

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from audit.models import AuditEvent
from audit.redact import redact_text
from mcptasks import access, wire
from mcptasks.models import (
    Effect,
    InputRequest,
    InputState,
    Task,
    TaskState,
    Tenant,
)
from mcptasks.tools.registry import registry

PAGE_SIZE = 50
MERGE_TENANTS_MAX = 20
# A cancel requested this long ago on a task that still runs lands in the operator's inbox.
STUCK_CANCEL_S = int(getattr(settings, "MCPTASKS_STUCK_CANCEL_S", 60))
TIMELINE_LIMIT = 500
# Heavy columns a list row never shows.
LIST_DEFERRED = ("arguments", "result", "error", "step_log", "client_capabilities")
SHOWN_BYTES = wire.SHOWN_BYTES


# ---------------------------------------------------------------- cursors
def encode_cursor(*parts: Any) -> str:
    raw = json.dumps([p.isoformat() if isinstance(p, datetime) else p for p in parts])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> list[Any] | None:
    """The parts of a cursor, or None when it is missing or not one of ours."""
    if not cursor or len(cursor) > 400:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        parts = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None
    return parts if isinstance(parts, list) else None


def _task_cursor(cursor: str | None) -> tuple[datetime, str] | None:
    parts = decode_cursor(cursor)
    if not parts or len(parts) != 2 or not all(isinstance(p, str) for p in parts):
        return None
    created_at = parse_datetime(parts[0])
    if created_at is None or timezone.is_naive(created_at):
        return None
    return created_at, parts[1]


@dataclass
class Page:
    """One page of rows, newest first, with the cursors of its neighbours (None at an end)."""

    rows: list[Any]
    older: str | None = None
    newer: str | None = None


# ---------------------------------------------------------------- tasks list
# The pseudo-state of a completed task whose approval gate was rejected (Task.outcome).
REJECTED = "rejected"
TASK_LIST_STATES = [*TaskState.values, REJECTED]


@dataclass(frozen=True)
class TaskFilters:
    """What the tasks list filters on; empty fields do not filter. ``tenant_id`` None means
    every tenant the user sees."""

    tenant_id: int | None = None
    state: str = ""
    tool: str = ""
    principal: str = ""
    created_from: date | None = None
    created_to: date | None = None  # inclusive
    search: str = ""

    def q(self) -> Q:
        condition = Q()
        if self.state == REJECTED:
            condition &= Q(state=TaskState.COMPLETED, outcome=REJECTED)
        elif self.state == TaskState.COMPLETED:
            # A rejected task is listed as rejected, never among the plain completions.
            condition &= Q(state=TaskState.COMPLETED) & ~Q(outcome=REJECTED)
        elif self.state:
            condition &= Q(state=self.state)
        if self.tool:
            condition &= Q(tool_name=self.tool)
        if self.principal:
            condition &= Q(principal__username=self.principal)
        if self.created_from:
            condition &= Q(created_at__gte=_day_start(self.created_from))
        if self.created_to:
            condition &= Q(created_at__lt=_day_start(self.created_to + timedelta(days=1)))
        if self.search:
            # A task id (or the first characters of one), or a backend job id.
            term = self.search
            found = Q(pk=term) | Q(backend_job_id=term)
            if len(term) >= 6:
                found |= Q(pk__startswith=term)
            condition &= found
        return condition


def _day_start(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=timezone.get_current_timezone())


def _task_rows(user: Any, filters: TaskFilters) -> QuerySet[Task]:
    return (
        access.visible_tasks_for_listing(user, filters.tenant_id)
        .filter(filters.q())
        .select_related("tenant", "principal")
        .defer(*LIST_DEFERRED)
    )


def _listing_parts(user: Any, filters: TaskFilters) -> list[QuerySet[Task]]:
    """The list's rows as querysets that each walk one index in created order.

    Across several whole tenants one ``tenant IN (…) ORDER BY created`` query would read and
    sort every task of them; one query per tenant (merged here) reads a page from each tenant's
    ``(tenant, created)`` index instead — up to :data:`MERGE_TENANTS_MAX` tenants.
    """
    if filters.tenant_id is not None:
        return [_task_rows(user, filters)]
    seeing = access.tenants_where(user, access.Action.VIEW)
    tenant_ids = (
        list(Tenant.objects.order_by("pk").values_list("pk", flat=True))
        if seeing is None
        else seeing
    )
    if not 1 < len(tenant_ids) <= MERGE_TENANTS_MAX:
        return [_task_rows(user, filters)]
    parts = [_task_rows(user, replace(filters, tenant_id=tenant_id)) for tenant_id in tenant_ids]
    if seeing is not None:  # the user's own and delegated tasks in other tenants
        parts.append(_task_rows(user, filters).exclude(tenant_id__in=tenant_ids))
    return parts


def _newest_first(
    parts: list[QuerySet[Task]], count: int, *, ascending: bool = False
) -> list[Task]:
    """The first ``count`` rows of the parts together, in (created, id) order."""
    ordering = ("created_at", "pk") if ascending else ("-created_at", "-pk")
    rows = [list(part.order_by(*ordering)[:count]) for part in parts]
    merged = heapq.merge(*rows, key=lambda task: (task.created_at, task.pk), reverse=not ascending)
    return list(islice(merged, count))


def task_page(
    user: Any,
    filters: TaskFilters,
    *,
    older_than: str | None = None,
    newer_than: str | None = None,
    limit: int = PAGE_SIZE,
) -> Page:
    """One page of the tasks ``user`` may see, newest first, by keyset on (created, id)."""
    parts = _listing_parts(user, filters)
    after = _task_cursor(older_than)
    before = _task_cursor(newer_than) if after is None else None
    if before is not None:
        created_at, task_id = before
        newer = Q(created_at__gte=created_at) & (Q(created_at__gt=created_at) | Q(pk__gt=task_id))
        found = _newest_first([part.filter(newer) for part in parts], limit + 1, ascending=True)
        has_more = len(found) > limit
        page = list(reversed(found[:limit]))
        return Page(
            rows=page,
            older=_cursor_of(page[-1]) if page else older_than,
            newer=_cursor_of(page[0]) if page and has_more else None,
        )
    if after is not None:
        created_at, task_id = after
        older = Q(created_at__lte=created_at) & (Q(created_at__lt=created_at) | Q(pk__lt=task_id))
        parts = [part.filter(older) for part in parts]
    found = _newest_first(parts, limit + 1)
    page = found[:limit]
    return Page(
        rows=page,
        older=_cursor_of(page[-1]) if len(found) > limit else None,
        newer=_cursor_of(page[0]) if after is not None and page else None,
    )


def _cursor_of(task: Task) -> str:
    return encode_cursor(task.created_at, task.pk)


def task_row(user: Any, task_id: str, filters: TaskFilters | None = None) -> Task | None:
    """One list row if ``user`` may see the task (and it matches ``filters``), else None."""
    if not isinstance(task_id, str) or not task_id or len(task_id) > 64:
        return None
    return _task_rows(user, filters or TaskFilters()).filter(pk=task_id).first()


def tool_names() -> list[str]:
    return sorted(tool_def.name for tool_def in registry.all())


# ---------------------------------------------------------------- inbox
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


def _stuck_cancels(user: Any, now: datetime | None) -> QuerySet[Task]:
    """Running tasks whose cancel intent is older than the threshold (a task in any other
    state is cancelled at once when intent is recorded, so only running ones can linger)."""
    threshold = (now or timezone.now()) - timedelta(seconds=STUCK_CANCEL_S)
    return access.tasks_where(user, access.Action.FORCE_CANCEL).filter(
        state=TaskState.RUNNING, cancel_requested_at__lt=threshold
    )


def inbox(user: Any, *, now: datetime | None = None) -> Inbox:
    """Input requests ``user`` may answer, unknown effects they may reconcile, and tasks whose
    requested cancel has not taken effect within :data:`STUCK_CANCEL_S` — three queries."""
    inputs = list(
        access.answerable_inputs(user)
        .select_related("task", "task__principal", "tenant")
        .defer(*(f"task__{name}" for name in LIST_DEFERRED))
        .order_by("created_at", "pk")[: INBOX_LIMIT + 1]
    )
    effects = list(
        access.reconcilable_effects(user)
        .select_related("task", "task__principal", "tenant")
        .defer("result", *(f"task__{name}" for name in LIST_DEFERRED))
        .order_by("updated_at", "pk")[: INBOX_LIMIT + 1]
    )
    stuck = list(
        _stuck_cancels(user, now)
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


def inbox_counts(user: Any, *, now: datetime | None = None) -> InboxCounts:
    return InboxCounts(
        inputs=access.answerable_inputs(user).count(),
        unknown_effects=access.reconcilable_effects(user).count(),
        stuck_cancels=_stuck_cancels(user, now).count(),
    )


# ---------------------------------------------------------------- task detail
@dataclass
class InputView:
    request: InputRequest
    decision: access.Decision | None  # None unless pending
    params: Any  # the question, redacted (the owner's raw form is in the wire task only)
    response: Any  # the stored answer, redacted


@dataclass
class TaskDetail:
    task: Task
    arguments: Any
    result: Any
    error: Any
    status_message: str
    inputs: list[InputView]
    effects: list[Effect]
    timeline: list[AuditEvent]
    timeline_truncated: bool
    delegations: list[tuple[Any, str]]
    may_cancel: bool
    may_force_cancel: bool
    may_reconcile: bool
    may_grant: bool
    candidates: list[Any]

    @property
    def pending_inputs(self) -> list[InputView]:
        return [view for view in self.inputs if view.request.state == InputState.PENDING]


shown = wire.shown
sensitive_keys_of = wire.sensitive_keys_of


def secret_fields(params: dict[str, Any]) -> frozenset[str]:
    """Fields an elicitation schema marks as sensitive (``x-sensitive`` or password format)."""
    properties = (params.get("requestedSchema") or {}).get("properties") or {}
    return frozenset(
        name
        for name, schema in properties.items()
        if isinstance(schema, dict)
        and (schema.get("x-sensitive") or schema.get("format") == "password")
    )


def get_task(user: Any, task_id: Any) -> Task | None:
    """The task with what its detail page shows of its relations, if ``user`` may see it."""
    task = access.get_visible_task(user, task_id)
    if task is None:
        return None
    return Task.objects.select_related("tenant", "principal", "token", "cancel_requested_by").get(
        pk=task.pk
    )


def task_detail(user: Any, task: Task) -> TaskDetail:
    """Everything the detail page shows of a task ``user`` may see (access checked by the
    caller with :func:`get_task`)."""
    sensitive = sensitive_keys_of(task.tool_name)
    requests = list(task.input_requests.select_related("answered_by").order_by("created_at", "pk"))
    pending = [r for r in requests if r.state == InputState.PENDING]
    decisions = access.answer_decisions(user, task, pending)
    inputs = [
        InputView(
            request=r,
            decision=decisions.get(r.pk),
            params=shown(r.params, sensitive),
            response=shown(r.response, secret_fields(r.params)),
        )
        for r in requests
    ]
    effects = list(task.effects.select_related("reconciled_by").order_by("created_at", "pk"))
    events = list(
        AuditEvent.objects.filter(task_id=task.pk, tenant_id=task.tenant_id).order_by("-id")[
            : TIMELINE_LIMIT + 1
        ]
    )
    truncated = len(events) > TIMELINE_LIMIT
    timeline = list(reversed(events[:TIMELINE_LIMIT]))
    terminal = task.state in {TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELLED}
    may_grant = bool(access.can(user, access.Action.GRANT, task))
    return TaskDetail(
        task=task,
        arguments=shown(task.arguments, sensitive),
        result=shown(task.result, sensitive),
        error=shown(task.error, sensitive),
        status_message=redact_text(task.status_message or ""),
        inputs=inputs,
        effects=effects,
        timeline=timeline,
        timeline_truncated=truncated,
        delegations=access.delegations_of(task),
        may_cancel=(
            not terminal
            and task.cancel_requested_at is None
            and bool(access.can(user, access.Action.CANCEL, task))
        ),
        may_force_cancel=not terminal and bool(access.can(user, access.Action.FORCE_CANCEL, task)),
        may_reconcile=bool(access.can(user, access.Action.RECONCILE, task)),
        may_grant=may_grant,
        candidates=list(access.delegation_candidates(task)) if may_grant else [],
    )


def get_input_request(user: Any, task_id: Any, key: str) -> tuple[Task, InputRequest] | None:
    """A task ``user`` may see and one of its input requests by key."""
    task = access.get_visible_task(user, task_id)
    if task is None:
        return None
    request = task.input_requests.filter(key=key).first()
    return (task, request) if request is not None else None


def get_effect(user: Any, effect_id: int) -> Effect | None:
    """An effect of a task ``user`` may see."""
    effect = Effect.objects.select_related("task", "task__tenant").filter(pk=effect_id).first()
    if effect is None or not access.can(user, access.Action.VIEW, effect.task):
        return None
    return effect


# ---------------------------------------------------------------- audit
@dataclass(frozen=True)
class AuditFilters:
    """The audit list's filters (the export's, plus a tenant): empty fields do not filter."""

    tenant_id: int | None = None
    actor: str = ""
    action: str = ""
    task_id: str = ""
    since: datetime | None = None
    until: datetime | None = None

    def q(self) -> Q:
        """The tenant, then the export's filters (one definition of what each matches)."""
        from audit.export import ExportFilters

        export = ExportFilters(
            actor=self.actor,
            action=self.action,
            task_id=self.task_id,
            since=self.since,
            until=self.until,
        )
        tenant = Q(tenant_id=self.tenant_id) if self.tenant_id is not None else Q()
        return tenant & export.q()


def _id_cursor(cursor: str | None) -> int | None:
    parts = decode_cursor(cursor)
    if not parts or len(parts) != 1 or not isinstance(parts[0], int):
        return None
    return int(parts[0])


def audit_page(
    user: Any,
    filters: AuditFilters,
    *,
    older_than: str | None = None,
    newer_than: str | None = None,
    limit: int = PAGE_SIZE,
) -> Page:
    """One page of the audit events ``user`` may read, newest first (by insertion order, the
    primary key, which within a chain is the sequence order)."""
    rows = access.visible_audit_events(user).filter(filters.q()).defer("prev_hash")
    after = _id_cursor(older_than)
    before = _id_cursor(newer_than) if after is None else None
    if before is not None:
        found = list(rows.filter(pk__gt=before).order_by("pk")[: limit + 1])
        page = list(reversed(found[:limit]))
        return Page(
            rows=page,
            older=encode_cursor(page[-1].pk) if page else older_than,
            newer=encode_cursor(page[0].pk) if page and len(found) > limit else None,
        )
    if after is not None:
        rows = rows.filter(pk__lt=after)
    found = list(rows.order_by("-pk")[: limit + 1])
    page = found[:limit]
    return Page(
        rows=page,
        older=encode_cursor(page[-1].pk) if len(found) > limit else None,
        newer=encode_cursor(page[0].pk) if after is not None and page else None,
    )


def audit_event(user: Any, event_id: int) -> AuditEvent | None:
    """One audit event if ``user`` may read it."""
    return access.visible_audit_events(user).filter(pk=event_id).first()


AUDIT_ACTIONS = (
    "task.created",
    "task.started",
    "task.input_requested",
    "task.input_answered",
    "approval.approved",
    "approval.rejected",
    "approval.gate_opened",
    "approval.policy_changed",
    "approval.group_changed",
    "task.input_timed_out",
    "task.sleeping",
    "task.woken",
    "task.requeued",
    "task.cancel_requested",
    "task.cancelled",
    "task.force_cancelled",
    "task.completed",
    "task.failed",
    "task.expired",
    "task.purged",
    "task.binding_changed",
    "effect.unknown",
    "effect.reconciled",
    "delegation.granted",
    "delegation.revoked",
    "token.issued",
    "token.revoked",
    "audit.exported",
    "audit.purged",
    "auth.login",
    "auth.logout",
    "auth.login_failed",
)
