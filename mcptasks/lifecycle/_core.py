"""Every write of task state (DESIGN §2, STYLE rules 2–3): the shared core.

Each verb is keyword-only, checks its move against :data:`TRANSITIONS`, applies it as a
conditional UPDATE that only matches a legal current state (and, for writes of a running attempt,
the attempt number: the fencing token), records its audit event in the same transaction, and
schedules side effects after commit. Illegal moves raise :class:`InvalidTransition` and change
nothing. This module holds the states, the named errors, :func:`_apply`, :func:`_audit`, fencing
and the open-effects rule that every verb module builds on."""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import (
    DateTimeField,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
)
from django.db.models.functions import Coalesce, Now
from django.db.models.sql import UpdateQuery
from django.utils import timezone

from audit.chain import TENANT_CHAIN_PREFIX, chain_for_tenant
from audit.record import Actor, Unsealed, record, unsealed
from mcptasks import events, metrics, outbox, search
from mcptasks.models import (
    ACTIVE_STATES,
    Effect,
    EffectState,
    InputRequest,
    InputState,
    Task,
    TaskState,
    Tenant,
)
from mcptasks.rowplan import RowPlan

log = logging.getLogger(__name__)

S = TaskState
SUSPENDED_STATES = frozenset(
    {S.QUEUED, S.SLEEPING, S.AWAITING_INPUT, S.AWAITING_OPERATOR, S.NEEDS_RECONCILIATION}
)
AWAITING_STATES = frozenset({S.AWAITING_INPUT, S.AWAITING_OPERATOR})


# verb -> (states it may start from, states it may lead to)
TRANSITIONS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "claim": (frozenset({S.QUEUED}), frozenset({S.RUNNING})),
    "requeue": (frozenset({S.RUNNING}), frozenset({S.QUEUED})),
    "report": (frozenset({S.RUNNING}), frozenset({S.RUNNING})),
    "request_input": (frozenset({S.RUNNING}), AWAITING_STATES),
    "answer_input": (AWAITING_STATES, AWAITING_STATES | {S.QUEUED}),
    "sleep": (frozenset({S.RUNNING}), frozenset({S.SLEEPING})),
    "wake": (frozenset({S.SLEEPING}), frozenset({S.QUEUED})),
    "cancel_now": (SUSPENDED_STATES | {S.RUNNING}, frozenset({S.CANCELLED})),
    "force_cancel": (ACTIVE_STATES, frozenset({S.CANCELLED})),
    "complete": (frozenset({S.RUNNING}), frozenset({S.COMPLETED})),
    "fail": (ACTIVE_STATES, frozenset({S.FAILED})),
    "mark_effect_unknown": (frozenset({S.RUNNING}), frozenset({S.NEEDS_RECONCILIATION})),
    "reconcile_effect": (frozenset({S.NEEDS_RECONCILIATION}), frozenset({S.QUEUED, S.FAILED})),
    "expire": (ACTIVE_STATES, frozenset({S.FAILED})),
    "timeout_input": (AWAITING_STATES, AWAITING_STATES | {S.QUEUED, S.FAILED}),
}


LEGAL_MOVES: frozenset[tuple[str, str]] = frozenset(
    (source, target)
    for sources, targets in TRANSITIONS.values()
    for source in sources
    for target in targets
)


# JSON-RPC internal error: the code of every failed task that is not a tool result.
INTERNAL_ERROR = -32603


class LifecycleError(Exception):
    """Base of the named errors lifecycle raises; nothing was changed when one is raised."""


class TaskNotFound(LifecycleError):
    pass


class InvalidTransition(LifecycleError):
    def __init__(self, task_id: str, verb: str, state: str) -> None:
        super().__init__(f"cannot {verb.replace('_', ' ')} task {task_id} in state {state}")
        self.task_id, self.verb, self.state = task_id, verb, state


class StaleAttempt(InvalidTransition):
    """A write from an attempt that no longer holds the task (fenced off)."""

    def __init__(self, task_id: str, verb: str, state: str, attempt: int, current: int) -> None:
        super().__init__(task_id, verb, state)
        self.args = (f"stale attempt {attempt} (current {current}) may not {verb} task {task_id}",)


class AtCapacity(LifecycleError):
    """A claim refused because the task's tenant or principal runs its cap (fairshare.py)."""


class NotRetryable(LifecycleError):
    """A retry refused: the task did not fail with an exception, or its tool forbids it."""


class InputNotPending(LifecycleError):
    """The input request is unknown, already answered, superseded or expired."""


class DecisionRefused(LifecycleError):
    """An approval decision that cannot be recorded (the reviewer decided already, a reject
    without a comment); the message says why."""


class EffectNotUnknown(LifecycleError):
    """The effect was already reconciled, or its outcome is not unknown."""


class AttemptMayBeAlive(LifecycleError):
    """ "not applied" refused: the attempt that left the effect may still be running and call
    downstream (its lease ran out less than MCPTASKS_RECONCILE_MARGIN_S ago)."""

    def __init__(self, step: str, not_before: datetime) -> None:
        super().__init__(
            f"'not applied' cannot be recorded for step {step!r} before "
            f"{not_before:%Y-%m-%d %H:%M:%S} UTC: the attempt that left it may still be running "
            f"and call the downstream until its lease has run out for "
            f"{settings.MCPTASKS_RECONCILE_MARGIN_S} s (MCPTASKS_RECONCILE_MARGIN_S). "
            "'applied' and 'fail' may be recorded now"
        )
        self.step, self.not_before = step, not_before


# The fields of every move that takes a task from its running attempt: no one holds it now.
RELEASED_LEASE: Mapping[str, Any] = MappingProxyType({"lease_owner": "", "lease_expires_at": None})


def _supersede_pending(task_id: str) -> None:
    """A task that ends answers none of its pending input requests: they are superseded."""
    InputRequest.objects.filter(task_id=task_id, state=InputState.PENDING).update(
        state=InputState.SUPERSEDED
    )


def _lease_deadline(seconds: int | None = None) -> ExpressionWrapper:
    """Lease expiry judged by the database clock, not the worker's."""
    return _deadline_after(seconds or settings.MCPTASKS_LEASE_S)


@functools.lru_cache(maxsize=16)
def _deadline_after(seconds: int) -> ExpressionWrapper:
    # One expression per lease length: its identity (an update plan's key) is computed once.
    return ExpressionWrapper(
        Now() + Value(timedelta(seconds=seconds)), output_field=DateTimeField()
    )


def _refusal(task_id: str, verb: str, attempt: int | None) -> LifecycleError:
    current = Task.objects.filter(pk=task_id).values("state", "attempt").first()
    if current is None:
        return TaskNotFound(task_id)
    if attempt is not None and current["attempt"] != attempt:
        log.warning(
            "fenced off a write from a stale attempt",
            extra={
                "task_id": task_id,
                "verb": verb,
                "attempt": attempt,
                "current_attempt": current["attempt"],
            },
        )
        return StaleAttempt(task_id, verb, current["state"], attempt, current["attempt"])
    return InvalidTransition(task_id, verb, current["state"])


def _apply(
    task_id: str,
    *,
    verb: str,
    target: str,
    fence: int | None = None,
    sources: Iterable[str] | None = None,
    where: Q | None = None,
    event: MoveEvent | None = None,
    **fields: Any,
) -> Task:
    """Move a task by one conditional UPDATE; return the updated row or raise.

    With ``event`` the move's audit event is inserted by the same statement, only if the move
    happened (:func:`_audited_move`); raises :class:`_Unplanned`, having written nothing,
    when this move has no planned statement to carry it."""
    allowed, targets = TRANSITIONS[verb]
    if target not in targets:
        raise ValueError(f"{verb} cannot lead to {target}")
    source_states = allowed if sources is None else allowed & frozenset(sources)
    if "status_message" in fields:  # what the dashboard's search reads: the redacted message
        fields["search_status"] = search.status_text(fields["status_message"])
    values = {"state": target, "version": _NEXT_VERSION, "updated_at": timezone.now(), **fields}
    plan = None
    if where is None and connection.vendor == "postgresql":
        plan = _update_plan(task_id, tuple(sorted(source_states)), fence, values)
    leaves_lease = fence is None and "lease_expires_at" in fields
    leaves_lease = leaves_lease and fields["lease_expires_at"] is None
    if event is not None and (plan is None or leaves_lease):
        raise _Unplanned  # only one statement may carry the event: the move's, alone
    if leaves_lease:
        _remember_leaving_lease(task_id)
    if plan is not None:
        task = plan.run(task_id, fence, values, event)
    else:
        task = _update_returning(task_id, _moved_rows(task_id, source_states, fence, where), values)
    if task is None:
        raise _refusal(task_id, verb, fence)
    metrics.TRANSITIONS.labels(verb=verb).inc()
    return task


class _Unplanned(Exception):
    """A move with an event that its statement cannot carry (no planned statement, or the
    move writes another statement first): nothing was written."""


@dataclass(frozen=True)
class Audited:
    """The audit event of a move, as :func:`_audit` takes it; ``from_row``: keys of ``data``
    whose values are the moved row's columns of that name, as the move left them (plain
    numbers such as ``attempt``: they are not redacted)."""

    action: str
    actor: Actor
    data: Mapping[str, Any] = MappingProxyType({})
    from_row: tuple[str, ...] = ()

    def data_of(self, task: Task) -> dict[str, Any]:
        return {**self.data, **{key: getattr(task, key) for key in self.from_row}}


@dataclass(frozen=True)
class MoveEvent:
    """An audited move's event, for the move's statement to insert (:func:`_audited_move`)."""

    unsealed: Unsealed
    from_row: tuple[str, ...]


def _audited_move(
    task_id: str,
    *,
    tenant_id: int | None,
    tenant_slug: str,
    audited: Audited,
    **move: Any,
) -> Task:
    """:func:`_apply` of ``move`` and its audit event, atomically. With the task's tenant
    known beforehand, on PostgreSQL with events sealed after commit and no outbox
    subscription of the tenant (:func:`_unsealed_audit`), one statement does both: one round
    trip, needing no transaction of its own (issue 23). Otherwise the move and
    :func:`_audit` in a transaction (the caller's, if it has one)."""
    if tenant_id is not None:
        unsealed_event = _unsealed_audit(
            tenant_id=tenant_id,
            tenant_slug=tenant_slug,
            task_id=task_id,
            state=move["target"],
            action=audited.action,
            actor=audited.actor,
            data=dict(audited.data),
        )
        if unsealed_event is not None:
            try:
                return _apply(task_id, event=MoveEvent(unsealed_event, audited.from_row), **move)
            except _Unplanned:
                pass
    # In the caller's transaction if it has one (a refusal raises before any write, so it
    # leaves that transaction usable), else in its own.
    with nullcontext() if connection.in_atomic_block else transaction.atomic():
        task = _apply(task_id, **move)
        _audit(task, audited.action, audited.actor, audited.data_of(task))
    return task


_NEXT_VERSION = F("version") + 1
_ID, _ATTEMPT = Task._meta.get_field("id"), Task._meta.get_field("attempt")


def _moved_rows(
    task_id: str, source_states: Iterable[str], fence: int | None, where: Q | None
) -> QuerySet[Task]:
    """The task, if it is in one of ``source_states`` (and held by attempt ``fence``, and
    matches ``where``): what a move updates."""
    rows = Task.objects.filter(pk=task_id, state__in=source_states)
    if fence is not None:
        rows = rows.filter(attempt=fence)
    if where is not None:
        rows = rows.filter(where)
    return rows


def _update_returning(task_id: str, rows: QuerySet[Task], values: dict[str, Any]) -> Task | None:
    """Update the one task ``rows`` matches and return it as updated, its tenant loaded; None
    if it matched none. On PostgreSQL one statement (``UPDATE … RETURNING`` joined to the
    tenant); elsewhere the UPDATE and a read back."""
    if connection.vendor != "postgresql":
        if rows.update(**values) != 1:
            return None
        return Task.objects.select_related("tenant").get(pk=task_id)
    sql, params = _update_statement(rows, values)
    return _run_returning(sql, params)


def _update_statement(rows: QuerySet[Task], values: dict[str, Any]) -> tuple[str, list[Any]]:
    """The ORM's UPDATE of ``rows`` to ``values``, returning the task joined to its tenant."""
    update, params = _bare_update(rows, values)
    return _returning_sql(update), params


def _bare_update(rows: QuerySet[Task], values: dict[str, Any]) -> tuple[str, list[Any]]:
    """The ORM's UPDATE of ``rows`` to ``values``, as compiled."""
    query: UpdateQuery = rows.query.chain(UpdateQuery)  # type: ignore[assignment]
    query.add_update_values(values)
    compiler = query.get_compiler(connection=connection)
    compiler.pre_sql_setup()  # as QuerySet.update: a filter across a join becomes pk IN (…)
    update, params = compiler.as_sql()
    return update, list(params)


@functools.lru_cache(maxsize=64)
def _returning_sql(update: str, event_from_row: tuple[str, ...] | None = None) -> str:
    """``update`` returning the moved task joined to its tenant. With ``event_from_row`` (a
    tuple, maybe empty) the statement also inserts the move's audit event, only if the move
    happened, and returns its id last; the event's ``data`` is its bound value with the moved
    row's ``event_from_row`` columns merged in. Bound: the update's values, then the event's.
    Built once per shape (cached)."""
    task_plan, tenant_plan = _returning_plans()
    tenant = ", ".join(tenant_plan.columns)
    event = ""
    if event_from_row is not None:
        data = "%s"
        if event_from_row:
            pairs = ", ".join(f"'{key}', moved.\"{key}\"" for key in event_from_row)
            data = f"(%s::jsonb || jsonb_build_object({pairs}))"
        # The chain by the tenant's slug as the move reads it (bound: the chain prefix), not
        # as the caller last saw it.
        columns = Unsealed.placeholders(data=data, chain='(%s || t."slug")')
        event = (
            f", event AS (INSERT INTO {Unsealed.columns()} "  # noqa: S608 - names from the models
            f"SELECT {columns} FROM moved "
            f'JOIN "{Tenant._meta.db_table}" t ON t."id" = moved."tenant_id" RETURNING id)'
        )
        tenant += ", (SELECT id FROM event)"
    return (
        f"WITH moved AS ({update} RETURNING {', '.join(task_plan.columns)}){event} "  # noqa: S608 - names from the models
        f"SELECT moved.*, {tenant} FROM moved "
        f'JOIN "{Tenant._meta.db_table}" n ON n."id" = moved."tenant_id"'
    )


def _run_returning(sql: str, params: Sequence[Any], event: MoveEvent | None = None) -> Task | None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    task_plan, tenant_plan = _returning_plans()
    size = len(task_plan.columns)
    if event is not None:
        row, event_id = row[:-1], row[-1]
    task = task_plan.instance(row[:size])
    Task.tenant.field.set_cached_value(task, tenant_plan.instance(row[size:]))
    if event is not None:
        written = event.unsealed.event
        written.chain = chain_for_tenant(task.tenant.slug)  # as the statement wrote it
        written.data.update({key: getattr(task, key) for key in event.from_row})
        event.unsealed.written(event_id)
    return task


# What an update plan binds per value it sets: the field's value (None: the value is bound,
# prepared by its field) or the constant parameters of an expression (its SQL is in the plan).
_Binding = tuple[Any, "tuple[Any, ...] | None"]


@dataclass(frozen=True)
class UpdatePlan:
    """A move's statement, compiled by the ORM once per process for its shape (issue 23): the
    fields it sets (each a bound value, NULL, or an expression: the same expression each time),
    the states it moves from and whether it is fenced. A move of that shape then binds its
    values without the ORM's compile — on the worker's hot path (claim, complete) that compile
    cost about as much as the statement's round trip."""

    sql: str
    update: str  # the bare UPDATE of ``sql``
    bindings: tuple[_Binding, ...]  # one per value set, in the statement's order
    states: tuple[str, ...]

    def params(self, task_id: str, fence: int | None, values: Mapping[str, Any]) -> list[Any]:
        params: list[Any] = []
        for (field, constant), value in zip(self.bindings, values.values(), strict=True):
            if constant is not None:
                params.extend(constant)
            elif value is not None:
                params.append(field.get_db_prep_save(value, connection))
        # The WHERE's values as the ORM binds a lookup's (an attempt as an Int4).
        params += [_ID.get_db_prep_value(task_id, connection), *self.states]
        if fence is not None:
            params.append(_ATTEMPT.get_db_prep_value(fence, connection))
        return params

    def run(
        self,
        task_id: str,
        fence: int | None,
        values: Mapping[str, Any],
        event: MoveEvent | None = None,
    ) -> Task | None:
        params = self.params(task_id, fence, values)
        if event is None:
            return _run_returning(self.sql, params)
        event_params = event.unsealed.params(chain=TENANT_CHAIN_PREFIX)
        sql = _returning_sql(self.update, event.from_row)
        return _run_returning(sql, [*params, *event_params], event)


def _update_plan(
    task_id: str, states: tuple[str, ...], fence: int | None, values: Mapping[str, Any]
) -> UpdatePlan | None:
    """The plan of a move of this shape (built, and checked against the ORM, on first use), or
    None when the shape cannot be planned (then the ORM compiles the move each time)."""
    shape = []
    for name, value in values.items():
        if hasattr(value, "resolve_expression"):
            kind: Any = getattr(value, "identity", None)
            if kind is None:
                return None  # an expression that cannot say whether it is the same
        elif hasattr(value, "prepare_database_save"):
            return None  # a model instance: the ORM binds its key
        else:
            kind = value is None
        shape.append((name, kind))
    key = (tuple(shape), states, fence is not None)
    if key not in _update_plans:
        _update_plans[key] = _new_update_plan(task_id, states, fence, values)
    return _update_plans[key]


_update_plans: dict[tuple[Any, ...], UpdatePlan | None] = {}


def _new_update_plan(
    task_id: str, states: tuple[str, ...], fence: int | None, values: Mapping[str, Any]
) -> UpdatePlan | None:
    update, params = _bare_update(_moved_rows(task_id, states, fence, None), dict(values))
    query = Task.objects.none().query.chain(UpdateQuery)
    compiler = query.get_compiler(connection=connection)
    bindings: list[_Binding] = []
    for name, value in values.items():
        field = Task._meta.get_field(name)
        if hasattr(field, "get_placeholder"):
            return None  # its SQL may depend on the value
        if hasattr(value, "resolve_expression"):
            resolved = value.resolve_expression(query, allow_joins=False, for_save=True)
            bindings.append((field, tuple(compiler.compile(resolved)[1])))
        else:
            bindings.append((field, None))
    plan = UpdatePlan(_returning_sql(update), update, tuple(bindings), states)
    # The plan binds what the ORM bound, or it is not used.
    if list(map(_comparable, plan.params(task_id, fence, values))) != list(
        map(_comparable, params)
    ):
        log.warning("a move's statement could not be planned", extra={"sql": update})
        return None
    return plan


def _comparable(param: Any) -> Any:
    """A bound value as compared: psycopg's JSON wrappers by what they wrap."""
    return (type(param), getattr(param, "obj", param))


@functools.cache
def _returning_plans() -> tuple[RowPlan, RowPlan]:
    return RowPlan.of(Task, f'"{Task._meta.db_table}"'), RowPlan.of(Tenant, "n")


def _remember_leaving_lease(task_id: str) -> None:
    """A move takes the task from its running attempt (not that attempt's own move): on the
    effects that attempt left ``intended``, record when its lease runs out — until then, and a
    margin, it may still be alive and reach the downstream (see task_reconcile_effect)."""
    lease = Task.objects.filter(
        pk=task_id, state=S.RUNNING, attempt=OuterRef("attempt"), lease_expires_at__isnull=False
    ).values("lease_expires_at")[:1]
    Effect.objects.filter(task_id=task_id, state=EffectState.INTENDED).update(
        holder_lease_expires_at=Coalesce(Subquery(lease), F("holder_lease_expires_at"))
    )


def _audit(
    task: Task,
    action: str,
    actor: Actor,
    data: dict[str, Any] | None = None,
    sensitive_keys: frozenset[str] = frozenset(),
) -> None:
    # The event's outbox rows, in this transaction; before record(), which locks the chain
    # head until commit.
    outbox.task_event(task, action, data, by=actor.display)
    record(action=action, actor=actor, sensitive_keys=sensitive_keys, **_event_of(task, data))


def _event_of(task: Task, data: Mapping[str, Any] | None) -> dict[str, Any]:
    """The task's side of its audit event, as :func:`audit.record.record`'s arguments."""
    return {
        "tenant_id": task.tenant_id,
        "tenant_slug": task.tenant.slug,
        "task_id": task.pk,
        "data": {"state": task.state, **(data or {})},
    }


def _unsealed_audit(
    *,
    tenant_id: int,
    tenant_slug: str,
    task_id: str,
    state: str,
    action: str,
    actor: Actor,
    data: dict[str, Any] | None = None,
    sensitive_keys: frozenset[str] = frozenset(),
) -> Unsealed | None:
    """:func:`_audit`'s event of ``action`` on the task (in ``state`` after it) for the
    writer's own statement to insert (one round trip for the change and its event, issue
    23), when that is all :func:`_audit` would write: on PostgreSQL, events sealed after
    commit, and no outbox subscription of the tenant. None otherwise: then the writer runs in
    a transaction and calls :func:`_audit`."""
    if not _audit_is_one_event(tenant_id):
        return None
    return unsealed(
        action=action,
        actor=actor,
        sensitive_keys=sensitive_keys,
        tenant_id=tenant_id,
        tenant_slug=tenant_slug,
        task_id=task_id,
        data={"state": state, **(data or {})},
    )


def _unsealed_audit_of(
    task: Task,
    action: str,
    actor: Actor,
    data: dict[str, Any] | None = None,
    sensitive_keys: frozenset[str] = frozenset(),
) -> Unsealed | None:
    """:func:`_unsealed_audit` of ``action`` on ``task`` as it is (its tenant loaded)."""
    if not _audit_is_one_event(task.tenant_id):
        return None
    return unsealed(
        action=action, actor=actor, sensitive_keys=sensitive_keys, **_event_of(task, data)
    )


def _audit_is_one_event(tenant_id: int) -> bool:
    """Whether the event is all :func:`_audit` would write for the tenant's task: on
    PostgreSQL, and the tenant subscribing to nothing."""
    return connection.vendor == "postgresql" and outbox.quiet(tenant_id)


def _changed(task: Task) -> None:
    events.broadcast_on_commit(task_id=task.pk, tenant_id=task.tenant_id, version=task.version)


def _run_on_commit(task: Task) -> None:
    events.enqueue_on_commit("run_task", task_id=task.pk)


def _fence(task_id: str, attempt: int) -> None:
    """Check that ``attempt`` still holds the running task, renewing its lease; lock the row."""
    if (
        Task.objects.filter(pk=task_id, state=S.RUNNING, attempt=attempt).update(
            lease_expires_at=_lease_deadline()
        )
        != 1
    ):
        raise _refusal(task_id, "write", attempt)


def _leave_open_effects(task: Task, *, actor: Actor, cause: str) -> list[str]:
    """The one rule for open effects at every end of a task (DESIGN §3): each effect still
    ``intended`` — started, never confirmed — becomes ``unknown``, audited, and so waits in the
    operator's reconciliation queue (on a terminal task, deciding it records what happened).

    Every verb that ends or abandons a task calls it in its transaction, after its move. How
    long the attempt that left an effect may still be alive was recorded when another's move
    took the task from it (:func:`_remember_leaving_lease`); an attempt that let go of the task
    itself (it suspended, failed or stopped at a safe point) is in no downstream call. Returns
    the steps it turned unknown.
    """
    open_effects = list(
        Effect.objects.filter(task_id=task.pk, state=EffectState.INTENDED)
        .order_by("created_at", "pk")
        .values_list("pk", "step", "attempt")
    )
    if not open_effects:
        return []
    Effect.objects.filter(pk__in=[pk for pk, _, _ in open_effects]).update(
        state=EffectState.UNKNOWN, updated_at=timezone.now()
    )
    for _, step, left_by in open_effects:
        _audit(task, "effect.unknown", actor, {"step": step, "cause": cause, "attempt": left_by})
    return [step for _, step, _ in open_effects]


def error_object(message: str, code: int = INTERNAL_ERROR, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return error
