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
from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from audit.models import AuditEvent
from audit.redact import redact_text
from mcptasks import access, inputs, limits, wire
from mcptasks import timeline as task_timeline
from mcptasks.models import (
    Effect,
    InputKind,
    InputRequest,
    InputState,
    Task,
    TaskState,
    Tenant,
)
from mcptasks.search import MIN_TEXT_TERM
from mcptasks.tools.registry import registry

PAGE_SIZE = 50
MERGE_TENANTS_MAX = 20
# A cancel requested this long ago on a task that still runs lands in the operator's inbox.
STUCK_CANCEL_S = settings.MCPTASKS_STUCK_CANCEL_S
TIMELINE_LIMIT = 500
# Heavy columns a list row never shows.
LIST_DEFERRED = (
    "arguments",
    "result",
    "error",
    "step_log",
    "client_capabilities",
    "search_summary",
    "search_status",
)
# The list's total is counted up to this many rows ("more than 1,000" beyond): the count reads
# at most this many matching rows, so it costs about the same on 100,000 tasks as on 1,000
# (B4; counting to 10,000 made every list page grow with the table).
COUNT_CAP = 1_000
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
    except (binascii.Error, ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(parts, list) or inputs.unstorable_text(parts) is not None:
        return None  # a NUL or a lone surrogate is not a position any query may compare with
    return parts


def _task_cursor(cursor: str | None) -> tuple[datetime, str] | None:
    parts = decode_cursor(cursor)
    if not parts or len(parts) != 2 or not all(isinstance(p, str) for p in parts):
        return None
    created_at = inputs.utc_datetime(parts[0])
    return None if created_at is None else (created_at, parts[1])


@dataclass
class Page:
    """One page of rows, newest first, with the cursors of its neighbours (None at an end)."""

    rows: list[Any]
    older: str | None = None
    newer: str | None = None
    total: int | None = None  # every row the filters match, counted up to COUNT_CAP

    @property
    def total_capped(self) -> bool:
        return self.total is not None and self.total > COUNT_CAP


# ---------------------------------------------------------------- tasks list
# How a finished task ended, as an operator filters on it: a tool error ("isError" result) or a
# rejected approval gate (Task.outcome, issue 21) is a rejection, not a completion.
REJECTED = "rejected"
_TOOL_ERROR = Q(result__isError=True)
OUTCOMES: dict[str, Q] = {
    "completed": Q(state=TaskState.COMPLETED)
    & (Q(result__isError__isnull=True) | Q(result__isError=False))
    & ~Q(outcome=REJECTED),
    "rejected": Q(state=TaskState.COMPLETED) & (_TOOL_ERROR | Q(outcome=REJECTED)),
    "failed": Q(state=TaskState.FAILED),
    "cancelled": Q(state=TaskState.CANCELLED),
}
# The orders the list offers, each walking a (tenant, column) index, and the column each reads.
SORTS = {
    "-created": "created_at",
    "created": "created_at",
    "-updated": "updated_at",
    "updated": "updated_at",
}
DEFAULT_SORT = "-created"


def _text_search(term: str) -> Q:
    """Tasks whose tool, requester, redacted status message or redacted argument summary
    contains ``term`` (each branch walks an index: the tool and requester are resolved to a
    few values first, the texts have trigram indexes on PostgreSQL)."""
    from django.contrib.auth import get_user_model

    needle = term.lower()
    found = Q(search_summary__contains=needle) | Q(search_status__contains=needle)
    tools = [name for name in tool_names() if needle in name.lower()]
    if tools:
        found |= Q(tool_name__in=tools)
    users = list(
        get_user_model()
        .objects.filter(username__icontains=needle)
        .order_by("pk")
        .values_list("pk", flat=True)[:100]
    )
    if users:
        found |= Q(principal_id__in=users)
    return found


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
    outcome: str = ""
    error_code: int | None = None
    sort: str = DEFAULT_SORT

    def q(self) -> Q:
        condition = Q()
        if self.outcome:
            condition &= OUTCOMES[self.outcome]
        if self.error_code is not None:
            condition &= Q(state=TaskState.FAILED, error__code=self.error_code)
        if self.state:
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
            if len(term) >= MIN_TEXT_TERM:
                found |= _text_search(term)
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
    # The user's own and delegated tasks in the other tenants they belong to (visible tasks are
    # in the user's tenants only): no query when they see every one of them whole — an
    # ``IN (…) AND NOT IN (…)`` that can match nothing is still a full scan for the planner.
    others = sorted(access.member_tenants(user) - set(tenant_ids)) if seeing is not None else []
    if others:
        parts.append(_task_rows(user, filters).filter(tenant_id__in=others))
    return parts


def _first_in_order(
    parts: list[QuerySet[Task]], count: int, column: str, *, ascending: bool = False
) -> list[Task]:
    """The first ``count`` rows of the parts together, in (column, id) order."""
    ordering = (column, "pk") if ascending else (f"-{column}", "-pk")
    rows = [list(part.order_by(*ordering)[:count]) for part in parts]
    merged = heapq.merge(
        *rows, key=lambda task: (getattr(task, column), task.pk), reverse=not ascending
    )
    return list(islice(merged, count))


def _beyond(column: str, value: datetime, task_id: str, *, ascending: bool) -> Q:
    """Rows after (value, id) in (column, id) order — in index-friendly form."""
    if ascending:
        return Q(**{f"{column}__gte": value}) & (Q(**{f"{column}__gt": value}) | Q(pk__gt=task_id))
    return Q(**{f"{column}__lte": value}) & (Q(**{f"{column}__lt": value}) | Q(pk__lt=task_id))


def task_page(
    user: Any,
    filters: TaskFilters,
    *,
    older_than: str | None = None,
    newer_than: str | None = None,
    limit: int = PAGE_SIZE,
    with_total: bool = False,
) -> Page:
    """One page of the tasks ``user`` may see in the filters' order (newest first unless
    ``sort`` says otherwise), by keyset on (column, id): ``older_than`` is the next page's
    cursor, ``newer_than`` the previous one's. ``with_total`` counts the matches too (up to
    :data:`COUNT_CAP`, in one query)."""
    column = SORTS.get(filters.sort, SORTS[DEFAULT_SORT])
    ascending = not filters.sort.startswith("-")
    parts = _listing_parts(user, filters)
    total = _task_rows(user, filters).order_by()[: COUNT_CAP + 1].count() if with_total else None
    after = _task_cursor(older_than)
    before = _task_cursor(newer_than) if after is None else None
    if before is not None:
        value, task_id = before
        back = _beyond(column, value, task_id, ascending=not ascending)
        found = _first_in_order(
            [part.filter(back) for part in parts], limit + 1, column, ascending=not ascending
        )
        has_more = len(found) > limit
        page = list(reversed(found[:limit]))
        return Page(
            rows=page,
            older=_cursor_of(page[-1], column) if page else older_than,
            newer=_cursor_of(page[0], column) if page and has_more else None,
            total=total,
        )
    if after is not None:
        value, task_id = after
        parts = [
            part.filter(_beyond(column, value, task_id, ascending=ascending)) for part in parts
        ]
    found = _first_in_order(parts, limit + 1, column, ascending=ascending)
    page = found[:limit]
    return Page(
        rows=page,
        older=_cursor_of(page[-1], column) if len(found) > limit else None,
        newer=_cursor_of(page[0], column) if after is not None and page else None,
        total=total,
    )


def _cursor_of(task: Task, column: str = "created_at") -> str:
    return encode_cursor(getattr(task, column), task.pk)


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


def _stuck_cancels(user: Any, now: datetime | None, tenant_id: int | None) -> QuerySet[Task]:
    """Running tasks whose cancel intent is older than the threshold (a task in any other
    state is cancelled at once when intent is recorded, so only running ones can linger)."""
    threshold = (now or timezone.now()) - timedelta(seconds=STUCK_CANCEL_S)
    return _in_tenant(
        access.tasks_where(user, access.Action.FORCE_CANCEL).filter(
            state=TaskState.RUNNING, cancel_requested_at__lt=threshold
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
    failure: Any = None
    may_retry: bool = False

    @property
    def pending_inputs(self) -> list[InputView]:
        return [view for view in self.inputs if view.request.state == InputState.PENDING]


shown = wire.shown
sensitive_keys_of = wire.sensitive_keys_of


secret_fields = inputs.secret_fields


def find_task(user: Any, task_id: Any, related: tuple[str, ...] = ()) -> Task | None:
    """The task if ``user`` may see it (access.get_visible_task), on every channel — MCP, REST,
    dashboard; a miss (unknown, foreign or expired id) counts against the user's budget of
    unknown-id lookups, and past it raises ``limits.Throttled`` (429)."""
    task = access.get_visible_task(user, task_id, related)
    if task is None and user is not None and user.is_authenticated:
        limits.check_unknown_lookup(principal_id=user.pk, task_id=str(task_id)[:64])
    return task


def get_task(user: Any, task_id: Any) -> Task | None:
    """The task with what its detail page shows of its relations, if ``user`` may see it."""
    return find_task(user, task_id, ("principal", "token", "cancel_requested_by"))


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
    timeline = task_timeline.fold(list(reversed(events[:TIMELINE_LIMIT])))
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
        failure=shown(task.failure, sensitive),
        may_retry=bool(task.failure)
        and task.state == TaskState.FAILED
        and bool(access.can(user, access.Action.RETRY, task)),
    )


def get_input_request(user: Any, task_id: Any, key: str) -> tuple[Task, InputRequest] | None:
    """A task ``user`` may see and one of its input requests by key — or, for an eligible
    reviewer who may not otherwise see the task, its approval gate (access.gate_for_reviewer)."""
    task = access.get_visible_task(user, task_id)
    if task is None:
        reviewed = access.gate_for_reviewer(user, task_id, key)
        if reviewed is not None:
            return reviewed
        find_task(user, task_id)  # the miss counts against the unknown-id budget
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
    if not parts or len(parts) != 1 or not isinstance(parts[0], int) or isinstance(parts[0], bool):
        return None
    return parts[0] if 0 <= parts[0] < 2**63 else None


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


def audit_event(user: Any, chain: str, seq: int) -> AuditEvent | None:
    """The event ``seq`` of ``chain`` (its address: sequence numbers are per chain) if ``user``
    may read it."""
    return access.visible_audit_events(user).filter(chain=chain, seq=seq).first()


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
