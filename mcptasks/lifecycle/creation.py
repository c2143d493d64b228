"""Creating tasks (with idempotency keys and active-task limits) and retrying failed ones."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import signals
from django.utils import timezone

from audit.record import Actor, Unsealed
from mcptasks import events, failures, search, tracing
from mcptasks.canonical import digest
from mcptasks.lifecycle._core import (
    LifecycleError,
    NotRetryable,
    S,
    TaskNotFound,
    _audit,
    _run_on_commit,
    _unsealed_audit_of,
)
from mcptasks.models import (
    ACTIVE_STATES,
    Audience,
    InputRequest,
    InputState,
    Task,
    TaskCreationKey,
    Tenant,
)
from mcptasks.task_ids import new_task_id

log = logging.getLogger(__name__)


@dataclass
class AnsweredInput:
    """An input answered before the task existed (MRTR questions before a task)."""

    key: str
    method: str
    params: dict[str, Any]
    response: dict[str, Any]


@dataclass
class NewTask:
    tenant_id: int
    principal_id: int
    tool_name: str
    arguments: dict[str, Any]
    policy_revision: str
    token_id: int | None = None
    ttl_ms: int | None = None
    poll_interval_ms: int = 1000
    client_capabilities: dict[str, Any] = field(default_factory=dict)
    creation_key: str | None = None
    sensitive_keys: frozenset[str] = frozenset()
    answered_inputs: list[AnsweredInput] = field(default_factory=list)
    correlation_id: str = ""
    # The tenant row when the caller already holds it (the authenticated principal's): saves
    # its read at creation.
    tenant: Tenant | None = None
    # digest(arguments) when the caller computed it already (the canonical JSON is a cost).
    argument_digest: str | None = None

    def digest(self) -> str:
        if self.argument_digest is None:
            self.argument_digest = digest(self.arguments)
        return self.argument_digest


def task_create(*, spec: NewTask, actor: Actor) -> tuple[Task, bool]:
    """Create a queued task and enqueue its first run; return ``(task, created)``.

    With a ``creation_key`` the same principal gets the existing task back instead of a second
    one (``created`` False), so a replayed request never creates two tasks; the key is honoured
    for ``MCPTASKS_IDEMPOTENCY_WINDOW_S``. Raises :class:`CreationKeyConflict` when the key was
    used for other arguments, :class:`LimitExceeded` past an active-task limit.

    On PostgreSQL, with events sealed after commit, an unkeyed task is checked against the
    limits, inserted and audited by one statement — one round trip, its own transaction
    (:func:`_create_in_one_statement`); otherwise (a creation key, answers given before
    creation, a tenant's outbox subscriptions, a caller's open transaction, SQLite) the limits
    are counted and the task, its key (:class:`TaskCreationKey`, unique per principal) and its
    event written in one transaction.
    """
    now = timezone.now()
    if spec.creation_key:
        existing = _existing_for_key(spec, now)
        if existing is not None:
            return existing, False
    task = _new_task(spec, now)
    created = _created_event(spec, task)
    event = None
    one_statement = not connection.in_atomic_block and connection.get_autocommit()
    if one_statement and not spec.creation_key and not spec.answered_inputs and not _save_signals():
        task.tenant = _tenant(spec)
        event = _unsealed_audit_of(task, "task.created", actor, created, spec.sensitive_keys)
    try:
        if event is not None:
            _create_in_one_statement(spec, task, event)
            _after_creation(task)  # committed: at once
        else:
            _check_active_limits(spec)
            if not Task.tenant.is_cached(task):  # read after the limits, if the caller has not
                task.tenant = _tenant(spec)
            with transaction.atomic():
                _insert_creation_key(spec, task, now)
                _insert_task(task)
                _insert_answered_inputs(spec, task, now)
                _audit(task, "task.created", actor, created, sensitive_keys=spec.sensitive_keys)
                _after_creation(task)  # on commit
    except IntegrityError:
        if not spec.creation_key:
            raise
        # A concurrent identical request won the unique (principal, key) race: this one's
        # transaction rolled back, its task with it.
        winner = _existing_for_key(spec, now)
        if winner is None:
            raise
        return winner, False
    log.info(
        "task created",
        extra={
            "task_id": task.pk,
            "tool": task.tool_name,
            "correlation_id": task.correlation_id,
        },
    )
    return task, True


def _after_creation(task: Task) -> None:
    """After the commit (or the caller's): the tenant's group only, since the task's own has no
    subscriber before its id is answered; and the first run."""
    events.broadcast_on_commit(
        task_id=task.pk, tenant_id=task.tenant_id, version=task.version, task_group=False
    )
    _run_on_commit(task)


def _new_task(spec: NewTask, now: datetime) -> Task:
    """The queued task ``spec`` asks for, not saved (its tenant not set)."""
    task = Task(
        id=new_task_id(now),  # the creation day's partition (mcptasks/task_ids.py)
        tenant_id=spec.tenant_id,
        principal_id=spec.principal_id,
        token_id=spec.token_id,
        tool_name=spec.tool_name,
        arguments=spec.arguments,
        argument_digest=spec.digest(),
        search_summary=search.summary_text(spec.arguments, spec.sensitive_keys),
        server_build=settings.MCPTASKS_SERVER_BUILD,
        policy_revision=spec.policy_revision,
        state=S.QUEUED.value,
        ttl_ms=spec.ttl_ms,
        poll_interval_ms=spec.poll_interval_ms,
        created_at=now,
        updated_at=now,
        expires_at=now + timedelta(milliseconds=spec.ttl_ms) if spec.ttl_ms else None,
        client_capabilities=spec.client_capabilities,
        correlation_id=spec.correlation_id or failures.new_correlation_id(),
        traceparent=tracing.new_task_traceparent(spec.tool_name),
    )
    return task  # every other field is as inserted: no column has a database default


def _created_event(spec: NewTask, task: Task) -> dict[str, Any]:
    """The data of the task's ``task.created`` audit event."""
    return {
        "tool": spec.tool_name,
        "arguments": spec.arguments,
        "argument_digest": task.argument_digest,
        "server_build": task.server_build,
        "policy_revision": task.policy_revision,
        "ttl_ms": spec.ttl_ms,
        "answered_before_creation": [a.key for a in spec.answered_inputs],
    }


def _insert_creation_key(spec: NewTask, task: Task, now: datetime) -> None:
    """Claim ``spec``'s creation key for ``task`` (none without a key). First in the
    transaction: a concurrent request for the same key waits on the unique index here, then
    fails before it writes a task (the foreign key to the task is checked at commit)."""
    if spec.creation_key:
        TaskCreationKey.objects.create(
            principal_id=spec.principal_id, key=spec.creation_key, task_id=task.pk, created_at=now
        )


def _insert_answered_inputs(spec: NewTask, task: Task, now: datetime) -> None:
    if not spec.answered_inputs:
        return
    issuer = task.token_issuer_id()
    for answered in spec.answered_inputs:
        InputRequest.objects.create(
            task=task,
            tenant_id=spec.tenant_id,
            principal_id=spec.principal_id,
            token_issuer_id=issuer,
            key=answered.key,
            method=answered.method,
            params=answered.params,
            audience=Audience.CLIENT,
            state=InputState.ANSWERED,
            response=answered.response,
            answered_by_id=spec.principal_id,
            answered_via="mcp",
            answered_at=now,
        )


def _save_signals() -> bool:
    """Does anything listen to a task's save (then the ORM's own save inserts it)?"""
    return signals.pre_save.has_listeners(Task) or signals.post_save.has_listeners(Task)


def _task_params(task: Task) -> list[Any]:
    """The task's column values, each prepared as the ORM prepares it (``pre_save``,
    ``get_db_prep_save``), in the order of ``Task._meta.concrete_fields``."""
    return [
        f.get_db_prep_save(f.pre_save(task, True), connection) for f in Task._meta.concrete_fields
    ]


def _task_columns() -> tuple[str, str]:
    """The task table and its columns, quoted and joined."""
    quote = connection.ops.quote_name
    columns = ", ".join(quote(str(f.column)) for f in Task._meta.concrete_fields)
    return quote(Task._meta.db_table), columns


@functools.cache
def _insert_sql() -> str:
    """The INSERT of a task row, every column bound (built once per process)."""
    table, columns = _task_columns()
    placeholders = ", ".join(["%s"] * len(Task._meta.concrete_fields))
    return f"INSERT INTO {table} ({columns}) VALUES ({placeholders})"  # noqa: S608 - names from the model


def _insert_task(task: Task) -> None:
    """``task.save(force_insert=True)`` without compiling the INSERT per task. The ORM's own
    save where save signals are connected."""
    if _save_signals():
        task.save(force_insert=True)
        return
    with connection.cursor() as cursor:
        cursor.execute(_insert_sql(), _task_params(task))
    task._state.adding, task._state.db = False, connection.alias


@functools.cache
def _create_sql() -> str:
    """The one statement of a creation on PostgreSQL (built once per process): the two bounded
    active-task counts; the task's INSERT only if both are below their limits; its audit
    event's INSERT only if the task was inserted; and the counts with the event's id (NULL:
    refused) as its row. Bound: the counts' parameters, the task's values, the two limits, the
    event's values. PostgreSQL types each ``INSERT … SELECT`` parameter by its column."""
    table, columns = _task_columns()
    placeholders = ", ".join(["%s"] * len(Task._meta.concrete_fields))
    principal, tenant = _bounded_counts()
    return (
        f"WITH active AS (SELECT {principal} AS principal, {tenant} AS tenant), "  # noqa: S608 - names from the models
        f"created AS (INSERT INTO {table} ({columns}) SELECT {placeholders} FROM active "
        "WHERE active.principal < %s AND active.tenant < %s RETURNING 1), "
        f"event AS (INSERT INTO {Unsealed.columns()} SELECT {Unsealed.placeholders()} FROM created "
        "RETURNING id) "
        "SELECT active.principal, active.tenant, (SELECT id FROM event) FROM active"
    )


def _create_in_one_statement(spec: NewTask, task: Task, event: Unsealed) -> None:
    """Check the limits, insert ``task`` and its ``task.created`` event: one statement, so
    one round trip and one transaction (the statement's own, in autocommit)."""
    by_principal, by_tenant = _limits()
    params = [*_count_params(spec), *_task_params(task), by_principal, by_tenant]
    with connection.cursor() as cursor:
        cursor.execute(_create_sql(), [*params, *event.params()])
        active_of_principal, active_of_tenant, event_id = cursor.fetchone()
    if event_id is None:
        _refuse_past_limits(active_of_principal, active_of_tenant)
        raise AssertionError("a creation within its limits inserted no event")  # pragma: no cover
    task._state.adding, task._state.db = False, connection.alias
    event.written(event_id)


class CreationKeyConflict(LifecycleError):
    """The idempotency key was already used by this principal for a different call."""


class LimitExceeded(LifecycleError):
    """A configured limit refuses the request; the message names the limit and its setting."""


def _existing_for_key(spec: NewTask, now: datetime) -> Task | None:
    """The task of ``spec``'s principal and creation key, or None (none, or the key expired:
    then it is released). Raises :class:`CreationKeyConflict` for another tool or arguments."""
    claim = (
        TaskCreationKey.objects.select_related("task__tenant")
        .filter(principal_id=spec.principal_id, key=spec.creation_key)
        .first()
    )
    if claim is None:
        return None
    window = timedelta(seconds=settings.MCPTASKS_IDEMPOTENCY_WINDOW_S)
    if claim.created_at < now - window:
        # The key expired: release it so this request creates a new task.
        TaskCreationKey.objects.filter(pk=claim.pk).delete()
        return None
    existing = claim.task
    if existing.tool_name != spec.tool_name or existing.argument_digest != spec.digest():
        raise CreationKeyConflict(
            "idempotency key already used for a different call "
            f"(task {existing.pk} with tool {existing.tool_name!r} and other arguments)"
        )
    return existing


# Code constants, in the order of the partial indexes' condition (models/tasks.py).
_ACTIVE_STATE_VALUES = tuple(sorted(str(state.value) for state in ACTIVE_STATES))


def _bounded_counts() -> tuple[str, str]:
    """The active tasks of the principal and of the tenant, each count stopping at its limit
    (bound: principal, its limit; the same of the tenant): the cost of a creation never grows
    with the tasks a principal or tenant already has active.

    The active states are written into the statement, not bound: a prepared statement's
    generic plan (mcptasks.conf prepares what a connection runs often) can then still prove
    the partial indexes ``task_active_*``; with bound states it could only scan every task of
    the principal (``tests/core/test_creation_statement.py``)."""
    table = connection.ops.quote_name(Task._meta.db_table)
    states = ", ".join(f"'{state}'" for state in _ACTIVE_STATE_VALUES)

    def bounded(column: str) -> str:
        return (
            f"(SELECT COUNT(*) FROM (SELECT 1 FROM {table} "  # noqa: S608 - identifiers only
            f'WHERE "{column}" = %s AND "state" IN ({states}) LIMIT %s) active)'
        )

    return bounded("principal_id"), bounded("tenant_id")


@functools.cache
def _active_counts_sql() -> str:
    """Both bounded active-task counts in one row (built once per process)."""
    return "SELECT {}, {}".format(*_bounded_counts())


def _limits() -> tuple[int, int]:
    return (
        settings.MCPTASKS_MAX_ACTIVE_TASKS_PER_PRINCIPAL,
        settings.MCPTASKS_MAX_ACTIVE_TASKS_PER_TENANT,
    )


def _count_params(spec: NewTask) -> list[int | str]:
    """The parameters of :func:`_bounded_counts` for ``spec``'s principal and tenant."""
    by_principal, by_tenant = _limits()
    return [spec.principal_id, max(by_principal, 0), spec.tenant_id, max(by_tenant, 0)]


def _check_active_limits(spec: NewTask) -> None:
    """Active (non-terminal) tasks per principal and per tenant. Checked by a count bounded by
    each limit at creation, so concurrent creations may overshoot by at most the number of
    requests in flight."""
    with connection.cursor() as cursor:
        cursor.execute(_active_counts_sql(), _count_params(spec))
        active_of_principal, active_of_tenant = cursor.fetchone()
    _refuse_past_limits(active_of_principal, active_of_tenant)


def _refuse_past_limits(active_of_principal: int, active_of_tenant: int) -> None:
    """Raise :class:`LimitExceeded` for the first limit these counts reach."""
    by_principal, by_tenant = _limits()
    if active_of_principal >= by_principal:
        raise LimitExceeded(
            f"Too many active tasks for this principal: the limit is {by_principal} "
            "(MCPTASKS_MAX_ACTIVE_TASKS_PER_PRINCIPAL); wait for some to finish "
            "or cancel them"
        )
    if active_of_tenant >= by_tenant:
        raise LimitExceeded(
            f"Too many active tasks for this tenant: the limit is {by_tenant} "
            "(MCPTASKS_MAX_ACTIVE_TASKS_PER_TENANT)"
        )


def _tenant(spec: NewTask) -> Tenant:
    """The task's tenant: ``spec.tenant`` when the caller has it, else read."""
    if spec.tenant is not None and spec.tenant.pk == spec.tenant_id:
        return spec.tenant
    return Tenant.objects.get(pk=spec.tenant_id)


def task_retry(*, task_id: str, actor: Actor, reason: str = "") -> Task:
    """Retry a task that failed with an exception, from its failed step: a new task (a terminal
    state never changes) with the failed one's recorded steps and applied effects, so applied
    effects are not repeated (failures.py). Audited on both tasks; returns the new task."""
    with transaction.atomic():
        failed = (
            Task.objects.select_for_update().select_related("tenant").filter(pk=task_id).first()
        )
        if failed is None:
            raise TaskNotFound(task_id)
        refusal = failures.retry_refusal(failed)
        if refusal:
            raise NotRetryable(f"cannot retry task {task_id}: {refusal}")
        task, _ = task_create(
            spec=NewTask(
                tenant_id=failed.tenant_id,
                principal_id=failed.principal_id,
                token_id=failed.token_id,
                tool_name=failed.tool_name,
                arguments=failed.arguments,
                policy_revision=failed.policy_revision,
                ttl_ms=failed.ttl_ms,
                poll_interval_ms=failed.poll_interval_ms,
                client_capabilities=failed.client_capabilities,
                correlation_id=failed.correlation_id,
                tenant=failed.tenant,
            ),
            actor=actor,
        )
        failures.copy_progress(failed, task)
        Task.objects.filter(pk=task.pk).update(step_log=failed.step_log, retry_of=failed.pk)
        step = (failed.failure or {}).get("step", "")
        _audit(failed, "task.retried", actor, {"retry_task_id": task.pk, "reason": reason})
        _audit(
            task,
            "task.retry_of",
            actor,
            {"retry_of": failed.pk, "from_step": step, "reason": reason},
        )
    return Task.objects.select_related("tenant").get(pk=task.pk)
