"""Every write of task state (DESIGN §2, STYLE rules 2–3).

Each verb is keyword-only, checks its move against :data:`TRANSITIONS`, applies it as a
conditional UPDATE that only matches a legal current state (and, for writes of a running attempt,
the attempt number: the fencing token), records its audit event in the same transaction, and
schedules side effects after commit. Illegal moves raise :class:`InvalidTransition` and change
nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import (
    Count,
    DateTimeField,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    Subquery,
    Value,
)
from django.db.models.functions import Coalesce, Now
from django.utils import timezone

from audit import holds
from audit.record import Actor, record
from mcptasks import events, failures, fairshare, metrics, outbox, search, tracing
from mcptasks.canonical import digest
from mcptasks.models import (
    ACTIVE_STATES,
    TERMINAL_STATES,
    ApprovalDecision,
    Audience,
    Effect,
    EffectState,
    GateOutcome,
    InputKind,
    InputRequest,
    InputState,
    Task,
    TaskState,
    TaskStep,
    Tenant,
)

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


# ---------------------------------------------------------------- internals
def _lease_deadline(seconds: int | None = None) -> ExpressionWrapper:
    """Lease expiry judged by the database clock, not the worker's."""
    return ExpressionWrapper(
        Now() + Value(timedelta(seconds=seconds or settings.MCPTASKS_LEASE_S)),
        output_field=DateTimeField(),
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
    **fields: Any,
) -> Task:
    """Move a task by one conditional UPDATE; return the updated row or raise."""
    allowed, targets = TRANSITIONS[verb]
    if target not in targets:
        raise ValueError(f"{verb} cannot lead to {target}")
    source_states = allowed if sources is None else allowed & frozenset(sources)
    if "status_message" in fields:  # what the dashboard's search reads: the redacted message
        fields["search_status"] = search.status_text(fields["status_message"])
    if fence is None and "lease_expires_at" in fields and fields["lease_expires_at"] is None:
        _remember_leaving_lease(task_id)
    rows = Task.objects.filter(pk=task_id, state__in=source_states)
    if fence is not None:
        rows = rows.filter(attempt=fence)
    if where is not None:
        rows = rows.filter(where)
    if (
        rows.update(state=target, version=F("version") + 1, updated_at=timezone.now(), **fields)
        != 1
    ):
        raise _refusal(task_id, verb, fence)
    metrics.TRANSITIONS.labels(verb=verb).inc()
    return Task.objects.select_related("tenant").get(pk=task_id)


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
    outbox.task_event(task, action, data)
    record(
        action=action,
        actor=actor,
        tenant_id=task.tenant_id,
        tenant_slug=task.tenant.slug,
        task_id=task.pk,
        data={"state": task.state, **(data or {})},
        sensitive_keys=sensitive_keys,
    )


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


# ---------------------------------------------------------------- creation
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


def task_create(*, spec: NewTask, actor: Actor) -> tuple[Task, bool]:
    """Create a queued task and enqueue its first run; return ``(task, created)``.

    With a ``creation_key`` the same principal gets the existing task back instead of a second
    one (``created`` False), so a replayed request never creates two tasks; the key is honoured
    for ``MCPTASKS_IDEMPOTENCY_WINDOW_S``. Raises :class:`CreationKeyConflict` when the key was
    used for other arguments, :class:`LimitExceeded` past an active-task limit.
    """
    now = timezone.now()
    if spec.creation_key:
        existing = _existing_for_key(spec, now)
        if existing is not None:
            return existing, False
    tenant = _check_active_limits(spec)
    try:
        with transaction.atomic():
            task = Task.objects.create(
                tenant_id=spec.tenant_id,
                principal_id=spec.principal_id,
                token_id=spec.token_id,
                tool_name=spec.tool_name,
                arguments=spec.arguments,
                argument_digest=digest(spec.arguments),
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
                creation_key=spec.creation_key,
                correlation_id=spec.correlation_id or failures.new_correlation_id(),
                traceparent=tracing.new_task_traceparent(spec.tool_name),
            )
            task.tenant = tenant  # every other field is as inserted: no column has a DB default
            for answered in spec.answered_inputs:
                InputRequest.objects.create(
                    task=task,
                    tenant_id=spec.tenant_id,
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
            _audit(
                task,
                "task.created",
                actor,
                {
                    "tool": spec.tool_name,
                    "arguments": spec.arguments,
                    "argument_digest": task.argument_digest,
                    "server_build": task.server_build,
                    "policy_revision": task.policy_revision,
                    "ttl_ms": spec.ttl_ms,
                    "answered_before_creation": [a.key for a in spec.answered_inputs],
                },
                sensitive_keys=spec.sensitive_keys,
            )
            _changed(task)
            _run_on_commit(task)
    except IntegrityError:
        if not spec.creation_key:
            raise
        # A concurrent identical request won the unique (principal, creation_key) race.
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


class CreationKeyConflict(LifecycleError):
    """The idempotency key was already used by this principal for a different call."""


class LimitExceeded(LifecycleError):
    """A configured limit refuses the request; the message names the limit and its setting."""


def _existing_for_key(spec: NewTask, now: datetime) -> Task | None:
    existing = (
        Task.objects.select_related("tenant")
        .filter(principal_id=spec.principal_id, creation_key=spec.creation_key)
        .first()
    )
    if existing is None:
        return None
    window = timedelta(seconds=settings.MCPTASKS_IDEMPOTENCY_WINDOW_S)
    if existing.created_at < now - window:
        # The key expired: release it so this request creates a new task.
        Task.objects.filter(pk=existing.pk, creation_key=spec.creation_key).update(
            creation_key=None
        )
        return None
    if existing.tool_name != spec.tool_name or existing.argument_digest != digest(spec.arguments):
        raise CreationKeyConflict(
            "idempotency key already used for a different call "
            f"(task {existing.pk} with tool {existing.tool_name!r} and other arguments)"
        )
    return existing


def _active_count(**where: Any) -> Coalesce:
    """A subquery counting the active (non-terminal) tasks that match ``where``."""
    rows = (
        Task.objects.filter(state__in=ACTIVE_STATES, **where)
        .order_by()
        .values(*where)
        .annotate(active=Count("pk"))
        .values("active")
    )
    return Coalesce(Subquery(rows), 0)


def _check_active_limits(spec: NewTask) -> Tenant:
    """Active (non-terminal) tasks per principal and per tenant. Checked by count at creation,
    so concurrent creations may overshoot by at most the number of requests in flight.

    Returns the task's tenant, read in the same query as both counts."""
    tenant = Tenant.objects.annotate(
        active_of_principal=_active_count(principal_id=spec.principal_id),
        active_of_tenant=_active_count(tenant_id=spec.tenant_id),
    ).get(pk=spec.tenant_id)
    limit = settings.MCPTASKS_MAX_ACTIVE_TASKS_PER_PRINCIPAL
    if tenant.active_of_principal >= limit:
        raise LimitExceeded(
            f"Too many active tasks for this principal: the limit is {limit} "
            "(MCPTASKS_MAX_ACTIVE_TASKS_PER_PRINCIPAL); wait for some to finish "
            "or cancel them"
        )
    limit = settings.MCPTASKS_MAX_ACTIVE_TASKS_PER_TENANT
    if tenant.active_of_tenant >= limit:
        raise LimitExceeded(
            f"Too many active tasks for this tenant: the limit is {limit} "
            "(MCPTASKS_MAX_ACTIVE_TASKS_PER_TENANT)"
        )
    return tenant


# ---------------------------------------------------------------- worker verbs
def task_claim(*, task_id: str, worker: str) -> Task:
    """Take a queued task for one attempt: lease, attempt + 1 (the new fencing token)."""
    with transaction.atomic():
        if refusal := fairshare.claim_refusal(task_id):
            raise AtCapacity(f"task {task_id} waits for room: {refusal}")
        task = _apply(
            task_id,
            verb="claim",
            target=S.RUNNING,
            lease_owner=worker,
            lease_expires_at=_lease_deadline(),
            attempt=F("attempt") + 1,
            wake_at=None,
        )
        _audit(task, "task.started", Actor.system(worker), {"attempt": task.attempt})
        _changed(task)
    return task


def task_renew_lease(*, task_id: str, attempt: int) -> None:
    """Extend the lease of a running attempt (not audited, not a visible change)."""
    _fence(task_id, attempt)


def task_requeue(*, task_id: str) -> Task:
    """Give a running task whose lease expired back to the queue (the reaper's verb)."""
    with transaction.atomic():
        # The attempt's effects still intended stay so (the replay decides: an idempotent one
        # runs again); _apply remembers when that attempt's lease ran out, for reconciliation.
        task = _apply(
            task_id,
            verb="requeue",
            target=S.QUEUED,
            where=Q(lease_expires_at__lt=Now()),
            lease_owner="",
            lease_expires_at=None,
            lost_attempts=F("lost_attempts") + 1,
        )
        _audit(task, "task.requeued", Actor.system("reaper"), {"attempt": task.attempt})
        _changed(task)
        # Cancel intent recorded while it ran: queued now, so honoured at once, not run again.
        task = _after_suspend(task, Actor.system("reaper"))
        if task.state == S.QUEUED:
            _run_on_commit(task)
    return task


def task_report(*, task_id: str, attempt: int, message: str) -> Task:
    """Set the status message of a running task (a visible change; not audited)."""
    with transaction.atomic():
        task = _apply(
            task_id,
            verb="report",
            target=S.RUNNING,
            fence=attempt,
            status_message=message[:2000],
            lease_expires_at=_lease_deadline(),
        )
        _changed(task)
    return task


def task_record_step(*, task_id: str, attempt: int, key: str, kind: str, value: Any) -> None:
    """Record a replay step's outcome (fenced: only the attempt holding the task may write)."""
    with transaction.atomic():
        _fence(task_id, attempt)
        TaskStep.objects.create(task_id=task_id, key=key, kind=kind, value=value)


def task_record_job(*, task_id: str, attempt: int, backend_job_id: str) -> None:
    with transaction.atomic():
        _fence(task_id, attempt)
        Task.objects.filter(pk=task_id).update(backend_job_id=backend_job_id[:200])


def _after_suspend(task: Task, actor: Actor) -> Task:
    """A task that suspends with cancel intent recorded is cancelled at once."""
    if task.cancel_requested_at is None:
        return task
    return _cancel_now(task.pk, actor=actor)


@dataclass
class InputSpec:
    key: str
    method: str
    params: dict[str, Any]
    audience: str = Audience.CLIENT
    forbid_self_approval: bool = False
    deadline_at: datetime | None = None
    kind: str = InputKind.FORM
    gate: dict[str, Any] = field(default_factory=dict)


def task_request_input(
    *, task_id: str, attempt: int, requests: list[InputSpec], actor: Actor | None = None
) -> Task:
    """Record input requests and suspend the running task until they are answered."""
    if not requests:
        raise ValueError("task_request_input needs at least one request")
    actor = actor or Actor.system("worker")
    target = (
        S.AWAITING_INPUT
        if any(r.audience in (Audience.CLIENT, Audience.ANY) for r in requests)
        else S.AWAITING_OPERATOR
    )
    with transaction.atomic():
        _fence(task_id, attempt)
        task = Task.objects.select_related("tenant").get(pk=task_id)
        InputRequest.objects.bulk_create(
            [
                InputRequest(
                    task_id=task_id,
                    tenant_id=task.tenant_id,
                    key=r.key,
                    method=r.method,
                    params=r.params,
                    audience=r.audience,
                    forbid_self_approval=r.forbid_self_approval,
                    deadline_at=r.deadline_at,
                    kind=r.kind,
                    gate=r.gate,
                )
                for r in requests
            ]
        )
        message = (
            "Waiting for an operator" if target == S.AWAITING_OPERATOR else "Waiting for input"
        )
        task = _apply(
            task_id,
            verb="request_input",
            target=target,
            fence=attempt,
            lease_owner="",
            lease_expires_at=None,
            status_message=message,
        )
        _audit(
            task,
            "task.input_requested",
            actor,
            {
                "requests": [
                    {"key": r.key, "method": r.method, "audience": r.audience, "params": r.params}
                    for r in requests
                ]
            },
        )
        _changed(task)
        task = _after_suspend(task, actor)
    return task


def task_sleep(*, task_id: str, attempt: int, wake_at: datetime, message: str = "") -> Task:
    """Suspend a running task on a durable timer; it holds no worker until ``wake_at``."""
    with transaction.atomic():
        extra: dict[str, Any] = {"status_message": message} if message else {}
        task = _apply(
            task_id,
            verb="sleep",
            target=S.SLEEPING,
            fence=attempt,
            wake_at=wake_at,
            lease_owner="",
            lease_expires_at=None,
            **extra,
        )
        _audit(task, "task.sleeping", Actor.system("worker"), {"wake_at": wake_at.isoformat()})
        _changed(task)
        task = _after_suspend(task, Actor.system("worker"))
        delay = (wake_at - timezone.now()).total_seconds()
        if task.state == S.SLEEPING and delay <= settings.MCPTASKS_TIMER_ETA_MAX_S:
            events.enqueue_on_commit("wake_task", eta=wake_at, task_id=task.pk)
    return task


def task_wake(*, task_id: str) -> Task:
    """Queue a sleeping task whose timer is due."""
    with transaction.atomic():
        task = _apply(
            task_id,
            verb="wake",
            target=S.QUEUED,
            where=Q(wake_at__lte=timezone.now()),
            wake_at=None,
        )
        _audit(task, "task.woken", Actor.system("timer"))
        _changed(task)
        _run_on_commit(task)
    return task


def task_complete(
    *, task_id: str, attempt: int, result: dict[str, Any], rejected: bool | None = None
) -> Task:
    """Complete a running attempt with its CallToolResult (``isError`` results included).
    ``rejected``: whether an approval gate of the task was rejected, when the caller knows
    (the runner read the task's input requests); None reads it."""
    size = len(json.dumps(result))
    if size > settings.MCPTASKS_MAX_RESULT_BYTES:
        return task_fail(
            task_id=task_id,
            attempt=attempt,
            actor=Actor.system("worker"),
            error=error_object(
                f"Tool result of {size} bytes exceeded the limit of "
                f"{settings.MCPTASKS_MAX_RESULT_BYTES} bytes (MCPTASKS_MAX_RESULT_BYTES)"
            ),
        )
    # A task whose approval gate was rejected completes as the tool decides on the wire, but is
    # *rejected* everywhere else: never a plain "completed" that hides a rejection.
    if rejected is None:
        rejected = InputRequest.objects.filter(
            task_id=task_id, kind=InputKind.APPROVAL, outcome=GateOutcome.REJECTED
        ).exists()
    outcome = GateOutcome.REJECTED.value if rejected else ""
    with transaction.atomic():
        task = _apply(
            task_id,
            verb="complete",
            target=S.COMPLETED,
            fence=attempt,
            result=result,
            lease_owner="",
            lease_expires_at=None,
            outcome=outcome,
            status_message=(
                "Rejected"
                if rejected
                else "Completed with a tool error"
                if result.get("isError")
                else "Completed"
            ),
        )
        _audit(
            task,
            "task.completed",
            Actor.system("worker"),
            {"is_error": bool(result.get("isError")), **({"outcome": outcome} if outcome else {})},
        )
        _changed(task)
    return task


def task_fail(
    *,
    task_id: str,
    error: dict[str, Any],
    actor: Actor,
    attempt: int | None = None,
    failure: dict[str, Any] | None = None,
) -> Task:
    """Fail a task with a JSON-RPC error object: a running attempt's, or (no attempt) any
    active task, for sweepers and operators. ``failure``: the diagnosis (failures.py)."""
    extra: dict[str, Any] = {"failure": failure} if failure else {}
    with transaction.atomic():
        task = _apply(
            task_id,
            verb="fail",
            target=S.FAILED,
            fence=attempt,
            sources=[S.RUNNING] if attempt is not None else None,
            error=error,
            status_message=error["message"][:2000],
            lease_owner="",
            lease_expires_at=None,
            wake_at=None,
            **extra,
        )
        InputRequest.objects.filter(task_id=task_id, state=InputState.PENDING).update(
            state=InputState.SUPERSEDED
        )
        _leave_open_effects(task, actor=actor, cause="failed")
        _audit(task, "task.failed", actor, {"error": error, **extra})
        _changed(task)
    return task


# ---------------------------------------------------------------- input
def task_answer_input(
    *, task_id: str, key: str, response: dict[str, Any], actor: Actor, via: str
) -> Task:
    """Store the answer to one pending input request; resume the task once none is pending.

    Raises :class:`InputNotPending` if the key is not pending, :class:`InvalidTransition` if
    the task is not waiting for input. Authorization is the caller's job (access.py).
    """
    with transaction.atomic():
        _lock_awaiting(task_id, "answer_input")
        if (
            InputRequest.objects.filter(
                task_id=task_id, key=key, state=InputState.PENDING, kind=InputKind.FORM
            ).update(
                state=InputState.ANSWERED,
                response=response,
                answered_by_id=actor.user_id,
                answered_via=via,
                answered_at=timezone.now(),
            )
            != 1
        ):
            raise InputNotPending(key)
        target, message = _after_input(task_id, resuming="Resuming")
        task = _apply(task_id, verb="answer_input", target=target, status_message=message)
        request = InputRequest.objects.get(task_id=task_id, key=key)
        _audit(
            task,
            "task.input_answered",
            actor,
            {"key": key, "via": via, "action": response.get("action"), "response": response},
            sensitive_keys=_secret_fields(request.params),
        )
        _changed(task)
        if target == S.QUEUED:
            _run_on_commit(task)
    return task


def _lock_awaiting(task_id: str, verb: str) -> Task:
    """Lock a task that waits for input (its next state depends on which requests stay
    pending: STYLE rule 3); raise when it is gone or no longer waiting."""
    task = Task.objects.select_for_update().select_related("tenant").filter(pk=task_id).first()
    if task is None:
        raise TaskNotFound(task_id)
    if task.state not in AWAITING_STATES:
        raise InvalidTransition(task_id, verb, task.state)
    return task


def task_decide_approval(
    *,
    task_id: str,
    key: str,
    reviewer: Any,
    verdict: str,
    comment: str,
    actor: Actor,
    via: str,
) -> Task:
    """Record one reviewer's decision on a pending approval gate; open the gate at the
    policy's required approvals, close it at the first reject, and resume the task then.

    Decisions on one task are serialized by the task's row lock, so on PostgreSQL exactly the
    first N approvals open a gate and none is lost or doubled. Raises
    :class:`InputNotPending` (no such pending gate), :class:`DecisionRefused` (this reviewer
    decided already; a reject without a comment). Eligibility is the caller's (access.may_decide).
    """
    comment = comment.strip()
    if verdict not in ("approve", "reject"):
        raise DecisionRefused("a decision is approve or reject")
    if verdict == "reject" and not comment:
        raise DecisionRefused("a reject needs a comment saying why")
    with transaction.atomic():
        try:
            task = _lock_awaiting(task_id, "decide_approval")
        except InvalidTransition:
            raise InputNotPending(key) from None  # the gate closed and the task moved on
        gate = InputRequest.objects.filter(
            task_id=task_id, key=key, state=InputState.PENDING, kind=InputKind.APPROVAL
        ).first()
        if gate is None:
            raise InputNotPending(key)
        if gate.decisions.filter(reviewer=reviewer).exists():
            raise DecisionRefused("you have already decided on this approval")
        now = timezone.now()
        ApprovalDecision.objects.create(
            request=gate,
            task_id=task_id,
            tenant_id=task.tenant_id,
            reviewer=reviewer,
            verdict=verdict,
            comment=comment,
            via=via,
            created_at=now,
        )
        approvals = gate.decisions.filter(verdict="approve").count()
        required = int((gate.gate.get("policy") or {}).get("required", 1))
        outcome = (
            GateOutcome.REJECTED
            if verdict == "reject"
            else GateOutcome.APPROVED
            if approvals >= required
            else ""
        )
        data: dict[str, Any] = {"key": key, "via": via, "comment": comment}
        data.update(approvals=approvals, required=required)
        if outcome:
            decisions = [
                {
                    "reviewer": d.reviewer.get_username(),
                    "verdict": d.verdict,
                    "comment": d.comment,
                    "at": d.created_at.isoformat(),
                }
                for d in gate.decisions.select_related("reviewer").order_by("created_at", "id")
            ]
            InputRequest.objects.filter(pk=gate.pk).update(
                state=InputState.ANSWERED,
                outcome=outcome,
                response={
                    "action": "accept",
                    "content": {"outcome": outcome, "decisions": decisions},
                },
                answered_by_id=actor.user_id,
                answered_via=via,
                answered_at=now,
            )
            target, message = _after_input(task_id, resuming=f"Approval {outcome}; resuming")
        else:
            target = task.state
            message = f"Waiting for approval ({approvals} of {required})"
        task = _apply(task_id, verb="answer_input", target=target, status_message=message)
        _audit(
            task, "approval.approved" if verdict == "approve" else "approval.rejected", actor, data
        )
        if outcome == GateOutcome.APPROVED:
            _audit(task, "approval.gate_opened", actor, {"key": key, "approvals": approvals})
        _changed(task)
        if target == S.QUEUED:
            _run_on_commit(task)
    return task


def _after_input(task_id: str, *, resuming: str) -> tuple[str, str]:
    """Where a task waiting for input goes once one request is settled: back to the queue when
    none is pending, else the awaiting state the remaining audiences call for."""
    remaining = set(
        InputRequest.objects.filter(task_id=task_id, state=InputState.PENDING).values_list(
            "audience", flat=True
        )
    )
    if not remaining:
        return S.QUEUED, resuming
    if remaining & {Audience.CLIENT, Audience.ANY}:
        return S.AWAITING_INPUT, "Waiting for input"
    return S.AWAITING_OPERATOR, "Waiting for an operator"


def _secret_fields(params: dict[str, Any]) -> frozenset[str]:
    """Fields an elicitation schema marks as sensitive (``x-sensitive`` or password format)."""
    properties = (params.get("requestedSchema") or {}).get("properties") or {}
    return frozenset(
        name
        for name, schema in properties.items()
        if isinstance(schema, dict)
        and (schema.get("x-sensitive") or schema.get("format") == "password")
    )


def task_timeout_input(*, task_id: str, key: str, fail: bool = True) -> Task:
    """Expire a pending input request past its deadline: fail the task, or resume it so the
    tool sees a timed-out answer."""
    with transaction.atomic():
        if (
            InputRequest.objects.filter(
                task_id=task_id, key=key, state=InputState.PENDING, deadline_at__lte=timezone.now()
            ).update(state=InputState.EXPIRED)
            != 1
        ):
            raise InputNotPending(key)
        actor = Actor.system("sweeper")
        if fail:
            error = error_object(f"Input request {key!r} timed out waiting for an answer")
            task = _apply(
                task_id,
                verb="timeout_input",
                target=S.FAILED,
                error=error,
                status_message=error["message"],
            )
            InputRequest.objects.filter(task_id=task_id, state=InputState.PENDING).update(
                state=InputState.SUPERSEDED
            )
        else:
            target, message = _after_input(task_id, resuming="Input timed out; resuming")
            task = _apply(task_id, verb="timeout_input", target=target, status_message=message)
            if target == S.QUEUED:
                _run_on_commit(task)
        if task.state == S.FAILED:
            _leave_open_effects(task, actor=actor, cause="input_timeout")
        _audit(task, "task.input_timed_out", actor, {"key": key})
        _changed(task)
    return task


# ---------------------------------------------------------------- cancel
def _cancel_now(task_id: str, *, actor: Actor, attempt: int | None = None) -> Task:
    task = _apply(
        task_id,
        verb="cancel_now",
        target=S.CANCELLED,
        fence=attempt,
        sources=[S.RUNNING] if attempt is not None else SUSPENDED_STATES,
        where=Q(cancel_requested_at__isnull=False),
        lease_owner="",
        lease_expires_at=None,
        wake_at=None,
        status_message="Cancelled",
    )
    InputRequest.objects.filter(task_id=task_id, state=InputState.PENDING).update(
        state=InputState.SUPERSEDED
    )
    _leave_open_effects(task, actor=actor, cause="cancel")
    _audit(task, "task.cancelled", actor)
    _changed(task)
    return task


def task_cancel_now(*, task_id: str, actor: Actor, attempt: int | None = None) -> Task:
    """Honour recorded cancel intent: a suspended task at once, or (with ``attempt``) a
    running one at its next safe point."""
    with transaction.atomic():
        return _cancel_now(task_id, actor=actor, attempt=attempt)


def task_stop_overrun(*, task_id: str, attempt: int, limit_s: float) -> Task:
    """The worker's watchdog: end a running attempt past its tool's maximum run time — cancelled
    if a cancel was asked for (its step ignored it), else failed. Its step may still be inside
    a downstream call: its open effects become unknown, "not applied" waiting out its lease."""
    with transaction.atomic():
        _remember_leaving_lease(task_id)
        row = Task.objects.filter(pk=task_id, state=S.RUNNING, attempt=attempt).values(
            "cancel_requested_at"
        )
        if not row:
            raise _refusal(task_id, "stop", attempt)
        actor = Actor.system("watchdog")
        if row[0]["cancel_requested_at"] is not None:
            return _cancel_now(task_id, actor=actor, attempt=attempt)
        return task_fail(
            task_id=task_id,
            attempt=attempt,
            actor=actor,
            error=error_object(
                f"Task exceeded the maximum run time of {limit_s:g} s "
                "(the tool's max_run_s, or MCPTASKS_MAX_RUN_S); its step was stopped"
            ),
        )


def task_request_cancel(*, task_id: str, actor: Actor, reason: str = "") -> Task:
    """Record cancel intent and acknowledge; a task that is not running is cancelled at once.

    Cancelling a terminal task is an idempotent no-op that returns it unchanged.
    """
    with transaction.atomic():
        now = timezone.now()
        recorded = Task.objects.filter(
            pk=task_id, state__in=ACTIVE_STATES, cancel_requested_at__isnull=True
        ).update(
            cancel_requested_at=now,
            cancel_requested_by_id=actor.user_id,
            cancel_reason=reason[:2000],
            updated_at=now,
        )
        task = Task.objects.select_related("tenant").filter(pk=task_id).first()
        if task is None:
            raise TaskNotFound(task_id)
        if not recorded:
            return task  # terminal, or intent already recorded
        _audit(task, "task.cancel_requested", actor, {"reason": reason})
        if task.state in SUSPENDED_STATES:
            task = _cancel_now(task_id, actor=actor)
    return task


def task_force_cancel(*, task_id: str, actor: Actor, reason: str) -> Task:
    """End a task immediately whatever it is doing; an effect in flight becomes unknown."""
    if not reason.strip():
        raise ValueError("a force cancel needs a reason")
    with transaction.atomic():
        now = timezone.now()
        task = _apply(
            task_id,
            verb="force_cancel",
            target=S.CANCELLED,
            cancel_requested_at=now,
            cancel_requested_by_id=actor.user_id,
            cancel_reason=reason[:2000],
            lease_owner="",
            lease_expires_at=None,
            wake_at=None,
            status_message=f"Force-cancelled: {reason[:500]}",
        )
        InputRequest.objects.filter(task_id=task_id, state=InputState.PENDING).update(
            state=InputState.SUPERSEDED
        )
        _audit(task, "task.force_cancelled", actor, {"reason": reason})
        _leave_open_effects(task, actor=actor, cause="force_cancel")
        _changed(task)
        events.enqueue_on_commit("revoke_task", task_id=task.pk)
    return task


# ---------------------------------------------------------------- effects
def task_effect_intended(
    *, task_id: str, attempt: int, step: str, idempotency_key: str, idempotent: bool
) -> Effect:
    """Record that an effect is about to run (committed before the downstream call)."""
    with transaction.atomic():
        _fence(task_id, attempt)
        tenant_id = Task.objects.filter(pk=task_id).values_list("tenant_id", flat=True).get()
        effect, created = Effect.objects.get_or_create(
            task_id=task_id,
            step=step,
            defaults={
                "tenant_id": tenant_id,
                "idempotency_key": idempotency_key,
                "idempotent": idempotent,
                "state": EffectState.INTENDED,
                "attempt": attempt,
            },
        )
        if not created:
            Effect.objects.filter(pk=effect.pk).update(
                state=EffectState.INTENDED, attempt=attempt, updated_at=timezone.now()
            )
            effect.refresh_from_db()
    return effect


def task_effect_applied(
    *, task_id: str, attempt: int, step: str, result: Any, external_ref: str = ""
) -> None:
    with transaction.atomic():
        _fence(task_id, attempt)
        Effect.objects.filter(task_id=task_id, step=step, state=EffectState.INTENDED).update(
            state=EffectState.APPLIED,
            result=result,
            external_ref=external_ref[:500],
            updated_at=timezone.now(),
        )


def task_mark_effect_unknown(*, task_id: str, attempt: int, step: str) -> Task:
    """A non-idempotent effect found ``intended`` on replay: wait for an operator."""
    with transaction.atomic():
        task = _apply(
            task_id,
            verb="mark_effect_unknown",
            target=S.NEEDS_RECONCILIATION,
            fence=attempt,
            lease_owner="",
            lease_expires_at=None,
            status_message=f"Waiting for an operator to reconcile step {step!r}",
        )
        _leave_open_effects(task, actor=Actor.system("worker"), cause="replay")
        _changed(task)
        task = _after_suspend(task, Actor.system("worker"))
    return task


RECONCILE_DECISIONS = ("applied", "not_applied", "fail")


def task_reconcile_effect(
    *, effect_id: int, actor: Actor, decision: str, note: str, external_ref: str = ""
) -> Task:
    """Decide an unknown effect. On a waiting task: applied → the step continues with that
    outcome; not_applied → the step runs again; fail → the task fails. On a terminal task the
    decision only records what happened. A second decision is refused."""
    if decision not in RECONCILE_DECISIONS:
        raise ValueError(f"decision must be one of {', '.join(RECONCILE_DECISIONS)}")
    if not note.strip():
        raise ValueError("a reconciliation needs a reason")
    new_state = {
        "applied": EffectState.RECONCILED_APPLIED,
        "not_applied": EffectState.RECONCILED_NOT_APPLIED,
        "fail": EffectState.FAILED,
    }[decision]
    with transaction.atomic():
        effect = Effect.objects.select_related("task__tenant").filter(pk=effect_id).first()
        if effect is None:
            raise EffectNotUnknown(effect_id)
        now = timezone.now()
        fields: dict[str, Any] = {
            "state": new_state,
            "reconciled_by_id": actor.user_id,
            "reconcile_note": note[:2000],
            "reconciled_at": now,
            "updated_at": now,
        }
        if decision == "applied":
            fields["external_ref"] = external_ref[:500]
            fields["result"] = {"external_ref": external_ref, "reconciled": True}
        undecided = Effect.objects.filter(pk=effect_id, state=EffectState.UNKNOWN)
        if decision == "not_applied":
            # The attempt that left it may still call the downstream: judged by the database
            # clock, like the lease itself.
            margin = timedelta(seconds=settings.MCPTASKS_RECONCILE_MARGIN_S)
            presumed_dead = Q(holder_lease_expires_at__isnull=True) | Q(
                holder_lease_expires_at__lte=ExpressionWrapper(
                    Now() - Value(margin), output_field=DateTimeField()
                )
            )
            if undecided.filter(presumed_dead).update(**fields) != 1:
                current = Effect.objects.filter(pk=effect_id).first()
                if current is not None and current.state == EffectState.UNKNOWN:
                    assert current.not_applied_from is not None
                    raise AttemptMayBeAlive(current.step, current.not_applied_from)
                raise EffectNotUnknown(effect_id)
        elif undecided.update(**fields) != 1:
            raise EffectNotUnknown(effect_id)
        task = effect.task
        waiting_more = Effect.objects.filter(task_id=task.pk, state=EffectState.UNKNOWN).exists()
        if task.state == S.NEEDS_RECONCILIATION:
            if decision == "fail":
                error = error_object(
                    f"Operator failed the task while reconciling step {effect.step!r}: {note[:500]}"
                )
                task = _apply(
                    task.pk,
                    verb="reconcile_effect",
                    target=S.FAILED,
                    error=error,
                    status_message=error["message"],
                )
            elif not waiting_more:
                task = _apply(
                    task.pk,
                    verb="reconcile_effect",
                    target=S.QUEUED,
                    status_message="Reconciled; resuming",
                )
                _run_on_commit(task)
        _audit(
            task,
            "effect.reconciled",
            actor,
            {"step": effect.step, "decision": decision, "note": note, "external_ref": external_ref},
        )
        if task.state == S.FAILED:
            _leave_open_effects(task, actor=actor, cause="failed")
        _changed(task)
    return task


# ---------------------------------------------------------------- expiry
def task_expire(*, task_id: str) -> Task:
    """Fail a non-terminal task past its TTL (terminal states never change)."""
    with transaction.atomic():
        error = error_object("Task expired: it did not finish within its ttlMs")
        # expires_at comes from the application clock (created_at + ttlMs), and so does the
        # sweep's choice of candidates: judge it by that clock too, not the database's.
        task = _apply(
            task_id,
            verb="expire",
            target=S.FAILED,
            where=Q(expires_at__lte=timezone.now()),
            error=error,
            status_message=error["message"],
            lease_owner="",
            lease_expires_at=None,
            wake_at=None,
        )
        InputRequest.objects.filter(task_id=task_id, state=InputState.PENDING).update(
            state=InputState.SUPERSEDED
        )
        _leave_open_effects(task, actor=Actor.system("sweeper"), cause="expired")
        _audit(task, "task.expired", Actor.system("sweeper"))
        _changed(task)
    return task


UNDECIDED_EFFECTS = (EffectState.INTENDED, EffectState.UNKNOWN)


def task_purge(*, task_id: str) -> bool:
    """Delete a terminal task past its TTL plus the grace period, unless a legal hold covers
    it (:func:`audit.holds.task_is_held`). Audit rows stay.

    A task with an effect whose outcome is not known yet is kept (an effect left ``intended``
    first becomes ``unknown``): deleting it would drop the effect from the operator's queue.
    It is purged by a later sweep, once every such effect is reconciled."""
    grace = timedelta(seconds=settings.MCPTASKS_TERMINAL_GRACE_S)
    with transaction.atomic():
        task = (
            Task.objects.select_related("tenant")
            .filter(pk=task_id, state__in=TERMINAL_STATES, expires_at__lte=timezone.now() - grace)
            .first()
        )
        if task is None or holds.task_is_held(task.tenant_id, task.pk):
            return False
        _leave_open_effects(task, actor=Actor.system("sweeper"), cause="purge")
        deleted, _ = (
            Task.objects.filter(pk=task_id, state__in=TERMINAL_STATES)
            .exclude(effects__state__in=UNDECIDED_EFFECTS)
            .delete()
        )
        if not deleted:
            return False
        _audit(task, "task.purged", Actor.system("sweeper"))
    return True


# ---------------------------------------------------------------- delegations
def task_grant_delegation(
    *, task_id: str, actor: Actor, grantee: Any, delegation: str, revoke: bool = False
) -> Task:
    """Grant (or revoke) a per-task right for ``grantee``; audited. The caller authorized it
    with ``access.can(..., Action.GRANT, ...)``."""
    from mcptasks import access

    if delegation not in access.DELEGATIONS:
        raise ValueError(f"delegation must be one of {', '.join(access.DELEGATIONS)}")
    with transaction.atomic():
        task = Task.objects.select_related("tenant").filter(pk=task_id).first()
        if task is None:
            raise TaskNotFound(task_id)
        if revoke:
            access.remove_delegation(grantee=grantee, task=task, delegation=delegation)
        else:
            access.assign_delegation(grantee=grantee, task=task, delegation=delegation)
        _audit(
            task,
            "delegation.revoked" if revoke else "delegation.granted",
            actor,
            {"grantee": grantee.get_username(), "grantee_id": grantee.pk, "delegation": delegation},
        )
    return task


# ---------------------------------------------------------------- replay bookkeeping
def task_record_step_log(*, task_id: str, attempt: int, step_log: list[str]) -> None:
    """Store the step sequence of the running attempt (fenced)."""
    with transaction.atomic():
        _fence(task_id, attempt)
        Task.objects.filter(pk=task_id).update(step_log=step_log)


def task_note_binding_change(*, task_id: str, attempt: int, changes: dict[str, Any]) -> None:
    """Audit that a task resumed under another server build or tool policy revision."""
    with transaction.atomic():
        _fence(task_id, attempt)
        # The task row keeps the binding it was created with; the accepted new binding is
        # remembered as a step, so later resumes under it do not report the change again.
        accepted = "binding:" + digest({field: new for field, (_old, new) in changes.items()})
        _, first_time = TaskStep.objects.get_or_create(
            task_id=task_id, key=accepted[:200], defaults={"kind": "binding", "value": changes}
        )
        if first_time:
            task = Task.objects.select_related("tenant").get(pk=task_id)
            _audit(task, "task.binding_changed", Actor.system("worker"), {"changes": changes})


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
