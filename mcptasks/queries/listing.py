"""The dashboard's lists: the tasks list and the audit list, keyset pages with their cursors.

Read-only selectors (STYLE rule 1: lifecycle writes, queries read). Each takes the viewing
user, asks ``access`` which rows they may see (``access.visible_tasks``, the one listing
scope; ``access.visible_audit_events``), and returns
plain rows or small dataclasses shaped for one page: a bounded number of queries whatever the
row count (the query-count tests in tests/dashboard/ hold them to it), and orderings that walk an
index (``task_tenant_created``, ``task_principal_created``, the audit primary key).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace
from datetime import date, datetime, time, timedelta
from itertools import islice
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone

from audit import actions as audit_actions
from audit.models import AuditEvent
from mcptasks import access, inputs, task_partitions, wire
from mcptasks.models import Task, TaskState, Tenant
from mcptasks.pagination import decode_cursor, encode_cursor
from mcptasks.plans import planned_for_values
from mcptasks.search import MIN_TEXT_TERM
from mcptasks.tools.registry import registry

PAGE_SIZE = 50
MERGE_TENANTS_MAX = 20
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
    # The search's conditions, once :meth:`resolved` found them: a listing filters several
    # querysets (one per tenant, and the count) and the id search reads candidates each time.
    found: Q | None = field(default=None, compare=False, repr=False)

    def resolved(self) -> TaskFilters:
        """These filters with the search's conditions found now, for every query made of them."""
        if not self.search or self.found is not None:
            return self
        return replace(self, found=self._search())

    def _search(self) -> Q:
        """A task id (or the first characters of one), a backend job id, or text."""
        term = self.search
        found = Q(pk=term) | Q(backend_job_id=term)
        if len(term) >= 6:
            found |= task_partitions.id_search(term)
        if len(term) >= MIN_TEXT_TERM:
            found |= _text_search(term)
        return found

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
            condition &= self.found if self.found is not None else self._search()
        return condition


def _day_start(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=timezone.get_current_timezone())


def _task_rows(user: Any, filters: TaskFilters) -> QuerySet[Task]:
    access.roles(user)  # read once per request: the scope is planned on them (index order)
    return (
        access.visible_tasks(user, filters.tenant_id)
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
    others = (
        sorted(set(access.member_tenant_ids(user)) - set(tenant_ids)) if seeing is not None else []
    )
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
    if filters.search:
        with planned_for_values():  # the plan that suits a search depends on its term
            return _task_page(user, filters.resolved(), older_than, newer_than, limit, with_total)
    return _task_page(user, filters, older_than, newer_than, limit, with_total)


def _task_page(
    user: Any,
    filters: TaskFilters,
    older_than: str | None,
    newer_than: str | None,
    limit: int,
    with_total: bool,
) -> Page:
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
    """One page of the audit events ``user`` may read, newest first by insertion order (the
    primary key). Within a chain that is the sequence order, except where transactions
    committed out of id order: the sealer numbers committed events, so such an event's ``seq``
    follows those sealed before it committed (audit/seal.py)."""
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


AUDIT_ACTIONS = audit_actions.LISTED
