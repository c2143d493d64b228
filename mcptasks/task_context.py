"""The :class:`TaskContext` of one attempt of a task (DESIGN §4): a tool's steps, effects,
questions, approvals and sleeps, replayed from the task's records (the runner, runner.py, runs
the tool with it)."""

from __future__ import annotations

import functools
import json
import uuid as uuid_module
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.db import connection
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from audit.record import Actor
from mcptasks import approval_policies, lifecycle, tracing
from mcptasks.lifecycle import InputSpec
from mcptasks.models import (
    Audience,
    Effect,
    EffectState,
    InputKind,
    InputRequest,
    InputState,
    Task,
    TaskState,
    TaskStep,
)
from mcptasks.progress import Progress
from mcptasks.rowplan import RowPlan
from mcptasks.tools.context import (
    ELICIT,
    ROOTS,
    SAMPLE,
    Answer,
    EffectKey,
    NonDeterministicTool,
    Question,
    Suspend,
    ToolContext,
    ToolDefinitionError,
    WaitTimedOut,
    declares_input_kind,
    form_secret_fields,
)
from mcptasks.tools.registry import ToolDef

T = TypeVar("T")

MISSING_CAPABILITY = -32021


class Stop(Suspend):
    """The attempt no longer holds the task (cancelled, fenced off): stop without writing."""


class MissingCapability(Exception):
    def __init__(self, capability: str) -> None:
        super().__init__(
            f"The client that created this task did not declare the '{capability}' capability"
        )
        self.capability = capability


RECORDED: tuple[Any, ...] = (TaskStep, InputRequest, Effect)


def recorded_state(task_id: str) -> tuple[list[Any], ...]:
    """The task's steps, input requests and effects, in one statement (issue 23)."""
    statement, plans = _recorded_statement()
    found: tuple[list[Any], ...] = tuple([] for _ in plans)
    with connection.cursor() as cursor:
        cursor.execute(statement, [task_id] * len(plans))
        for row in cursor.fetchall():
            part = row[0]
            start, plan = plans[part]
            found[part].append(plan.instance(row[1 + start : 1 + start + len(plan.columns)]))
    return found


@functools.cache
def _recorded_statement() -> tuple[str, tuple[tuple[int, RowPlan], ...]]:
    """A UNION ALL of the three tables, each branch in its own columns (the others NULL, cast
    to their type: PostgreSQL types a bare NULL as text), first its part's number."""
    plans, start = [], 0
    for model in RECORDED:
        plans.append((start, RowPlan.of(model, f'"{model._meta.db_table}"')))
        start += len(model._meta.concrete_fields)
    nulls = [
        [f"CAST(NULL AS {f.db_type(connection)})" for f in model._meta.concrete_fields]
        for model in RECORDED
    ]
    branches = []
    for part, (model, (_, plan)) in enumerate(zip(RECORDED, plans, strict=True)):
        columns = [str(part)]
        for other, padding in enumerate(nulls):
            columns += list(plan.columns) if other == part else padding
        branches.append(
            f'SELECT {", ".join(columns)} FROM "{model._meta.db_table}" '  # noqa: S608 - names from the models
            f'WHERE "{model._meta.db_table}"."task_id" = %s'
        )
    return " UNION ALL ".join(branches), tuple(plans)


class TaskContext(ToolContext):
    """The replayed context of one attempt of one task."""

    def __init__(self, task: Task, tool_def: ToolDef) -> None:
        self.task = task
        self.tool = tool_def
        self.tool_name = task.tool_name
        self.arguments = task.arguments
        self.attempt = task.attempt
        self.capabilities = task.client_capabilities or {}
        self.recorded_log: list[str] = list(task.step_log or [])
        self.sequence: list[str] = []
        self.keys: set[str] = set()
        # Loaded on every run, first runs too: an effect recorded as intended must be found
        # whatever else was recorded, or a non-idempotent effect could run twice.
        steps, inputs, effects = recorded_state(task.pk)
        self.steps: dict[str, TaskStep] = {s.key: s for s in steps}
        self.inputs: dict[str, InputRequest] = {r.key: r for r in inputs}
        self.effects: dict[str, Effect] = {e.step: e for e in effects}
        self.counters: dict[str, int] = {}
        self.progress = Progress(task.pk, task.attempt)
        # A rule the tool broke (divergence, key reuse): raised again by every later ctx call
        # and at the end of the run, so a tool's ``except Exception`` cannot hide it.
        self.broken: ToolDefinitionError | None = None

    # ------------------------------------------------------------ safe points and steps
    def _safe_point(self) -> None:
        """Stop if the attempt lost the task; honour cancel intent."""
        if self.broken is not None:
            raise self.broken
        row = (
            Task.objects.filter(pk=self.task.pk)
            .values("state", "attempt", "cancel_requested_at")
            .first()
        )
        if row is None or row["state"] != TaskState.RUNNING or row["attempt"] != self.attempt:
            raise Stop()
        if row["cancel_requested_at"] is not None:
            lifecycle.task_cancel_now(
                task_id=self.task.pk, attempt=self.attempt, actor=Actor.system("worker")
            )
            raise Stop()

    def _step(self, key: str, kind: str) -> None:
        self._safe_point()
        if not isinstance(key, str) or not key:
            raise self._broke(ToolDefinitionError(f"{kind} needs a non-empty string key"))
        if key in self.keys:
            raise self._broke(ToolDefinitionError(f"step key {key!r} used twice in one run"))
        self.keys.add(key)
        entry = f"{kind}:{key}"
        position = len(self.sequence)
        self.sequence.append(entry)
        if position < len(self.recorded_log):
            if self.recorded_log[position] != entry:
                raise self._broke(
                    NonDeterministicTool(
                        f"step {position + 1} was {self.recorded_log[position]!r} when first run "
                        f"and is {entry!r} now; code between ctx calls must be deterministic"
                    )
                )
        else:
            self.recorded_log.append(entry)
            lifecycle.task_record_step_log(
                task_id=self.task.pk, attempt=self.attempt, step_log=self.recorded_log
            )

    def _broke(self, error: ToolDefinitionError) -> ToolDefinitionError:
        self.broken = error
        return error

    def _auto_key(self, kind: str) -> str:
        number = self.counters.get(kind, 0) + 1
        self.counters[kind] = number
        return f"{kind}#{number}"

    def _recorded(self, key: str, kind: str, make: Callable[[], Any]) -> Any:
        self._step(key, kind)
        step = self.steps.get(key)
        if step is not None:
            return step.value
        value = make()
        lifecycle.task_record_step(
            task_id=self.task.pk, attempt=self.attempt, key=key, kind=kind, value=value
        )
        return value

    # ------------------------------------------------------------ the API
    def report(
        self, message: str, *, progress: float | None = None, total: float | None = None
    ) -> None:
        # A task has no open request to stream progress on: the message is its statusMessage.
        self.check_progress(progress, total)
        self._safe_point()
        replaying = len(self.sequence) < len(self.recorded_log)
        self.progress.report(str(message), replaying=replaying)

    @tracing.step("now")
    def now(self) -> datetime:
        value = self._recorded(self._auto_key("now"), "now", lambda: timezone.now().isoformat())
        parsed = parse_datetime(value)
        assert parsed is not None
        return parsed

    @tracing.step("uuid")
    def uuid(self) -> uuid_module.UUID:
        return uuid_module.UUID(
            self._recorded(self._auto_key("uuid"), "uuid", lambda: str(uuid_module.uuid4()))
        )

    def job(self, external_id: str) -> None:
        self._safe_point()
        lifecycle.task_record_job(
            task_id=self.task.pk, attempt=self.attempt, backend_job_id=str(external_id)
        )

    def _require(self, capability: str) -> None:
        if capability not in self.capabilities:
            raise MissingCapability(capability)

    @tracing.step("ask")
    def ask_many(self, questions: dict[str, Question]) -> dict[str, Answer]:
        if not questions:
            raise ToolDefinitionError("ask_many needs at least one question")
        for key in questions:
            self._step(key, "ask")
        specs = []
        for key, question in questions.items():
            secret = form_secret_fields(question.schema)
            if secret:
                raise ToolDefinitionError(
                    f"question {key!r} asks for {', '.join(secret)} in a form: form "
                    "elicitation must never request secrets (PROTOCOL §3.4)"
                )
            if key in self.inputs:
                continue
            audience = question.audience
            if audience in (Audience.CLIENT, Audience.ANY) and not declares_input_kind(
                self.capabilities, ELICIT, question.params()
            ):
                if audience == Audience.CLIENT and not self.tool.operator_fallback:
                    raise MissingCapability("elicitation")
                audience = Audience.OPERATOR
            timeout = (
                question.timeout_s
                or self.tool.max_input_wait_s
                or settings.MCPTASKS_MAX_INPUT_WAIT_S
            )
            specs.append(
                InputSpec(
                    key=key,
                    method=ELICIT,
                    params=question.params(),
                    audience=audience,
                    forbid_self_approval=question.forbid_self_approval,
                    deadline_at=timezone.now() + timedelta(seconds=timeout) if timeout else None,
                    kind=InputKind.APPROVAL if question.gate is not None else InputKind.FORM,
                    gate=self._gate_of(key, question.gate),
                )
            )
        if specs:
            self._suspend_for(specs)
        return {key: self._answer_of(key) for key in questions}

    def _gate_of(self, key: str, gate: dict[str, Any] | None) -> dict[str, Any]:
        """An approval gate as declared, its policy tightened by the tenant's stored rule."""
        if gate is None:
            return {}
        policy = approval_policies.resolve(
            tenant_id=self.task.tenant_id,
            tool_name=self.task.tool_name,
            key=key,
            arguments=self.task.arguments,
            default=gate.get("policy") or {},
        )
        bound = approval_policies.bound_rules_digest(self.task.policy_revision)
        declared = policy["binding"][: len(bound)]
        if bound and declared != bound:
            # The tenant's rules changed since the task was created: the gate applies the
            # rules in force now (a tightening covers queued work); the change is audited.
            lifecycle.task_note_binding_change(
                task_id=self.task.pk,
                attempt=self.attempt,
                changes={"approval_policy": [bound, declared]},
            )
        return {**gate, "policy": policy}

    def _answer_of(self, key: str) -> Answer:
        request = self.inputs[key]
        if request.state == InputState.ANSWERED:
            return Answer.from_response(request.response or {})
        if request.state == InputState.EXPIRED:
            return Answer(action="timeout")
        raise Stop()  # still pending: this attempt should not be running

    def _suspend_for(self, specs: list[InputSpec]) -> None:
        lifecycle.task_request_input(task_id=self.task.pk, attempt=self.attempt, requests=specs)
        raise Suspend()

    def _single_request(self, key: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._step(key, "ask")
        if key not in self.inputs:
            self._suspend_for([InputSpec(key=key, method=method, params=params)])
        return self._answer_of(key).raw

    @tracing.step("sample")
    def sample(
        self, key: str, messages: list[dict[str, Any]], *, max_tokens: int = 256, **params: Any
    ) -> dict[str, Any]:
        self._require("sampling")
        return self._single_request(
            key, SAMPLE, {"messages": messages, "maxTokens": max_tokens, **params}
        )

    @tracing.step("roots")
    def roots(self, key: str) -> list[dict[str, Any]]:
        self._require("roots")
        return list(self._single_request(key, ROOTS, {}).get("roots") or [])

    @tracing.step("effect")
    def effect(self, step: str, fn: Callable[[EffectKey], T], *, idempotent: bool = False) -> T:
        self._step(step, "effect")
        idempotency_key = EffectKey(f"{self.task.pk}:{step}", fencing_token=self.attempt)
        existing = self.effects.get(step)
        if existing is not None:
            if existing.state in (EffectState.APPLIED, EffectState.RECONCILED_APPLIED):
                return existing.result  # type: ignore[no-any-return,return-value]
            if existing.state == EffectState.INTENDED and not idempotent:
                # Started, never confirmed: the outcome is unknown.
                lifecycle.task_mark_effect_unknown(
                    task_id=self.task.pk, attempt=self.attempt, step=step
                )
                raise Suspend()
            if existing.state in (EffectState.UNKNOWN, EffectState.FAILED):
                raise Stop()
        lifecycle.task_effect_intended(
            task_id=self.task.pk,
            attempt=self.attempt,
            step=step,
            idempotency_key=idempotency_key,
            idempotent=idempotent,
        )
        value = fn(idempotency_key)
        stored = json.loads(json.dumps(value, default=str))
        lifecycle.task_effect_applied(
            task_id=self.task.pk, attempt=self.attempt, step=step, result=stored
        )
        return stored  # type: ignore[no-any-return]

    @tracing.step("sleep")
    def sleep(self, key: str, seconds: float) -> None:
        wake_at = parse_datetime(
            self._recorded(
                key, "sleep", lambda: (timezone.now() + timedelta(seconds=seconds)).isoformat()
            )
        )
        assert wake_at is not None
        if timezone.now() >= wake_at:
            return
        lifecycle.task_sleep(
            task_id=self.task.pk,
            attempt=self.attempt,
            wake_at=wake_at,
            message=self.progress.take_pending(),
        )
        raise Suspend()

    @tracing.step("wait")
    def wait_until(
        self,
        key: str,
        check: Callable[[], bool],
        *,
        every: float = 5.0,
        timeout_s: float | None = None,
    ) -> None:
        self._step(key, "wait")
        deadline = None
        if timeout_s is not None:
            # Counted from the first check, recorded so every replay keeps the same deadline.
            deadline = parse_datetime(
                self._recorded(
                    f"{key}@deadline",
                    "wait_deadline",
                    lambda: (timezone.now() + timedelta(seconds=timeout_s)).isoformat(),
                )
            )
        step = self.steps.get(key)
        outcome = (step.value or {}) if step is not None else {}
        if outcome.get("done"):
            return
        if outcome.get("timed_out"):
            raise WaitTimedOut(outcome.get("message") or f"Gave up waiting for {key!r}")
        if check():
            lifecycle.task_record_step(
                task_id=self.task.pk,
                attempt=self.attempt,
                key=key,
                kind="wait",
                value={"done": True},
            )
            return
        wake_at = timezone.now() + timedelta(seconds=every)
        if deadline is not None and timezone.now() >= deadline:
            message = f"Gave up waiting for {key!r} after {timeout_s:g} s"
            lifecycle.task_record_step(
                task_id=self.task.pk,
                attempt=self.attempt,
                key=key,
                kind="wait",
                value={"done": False, "timed_out": True, "message": message},
            )
            raise WaitTimedOut(message)
        if deadline is not None:
            wake_at = min(wake_at, deadline)  # the last check falls on the deadline
        lifecycle.task_sleep(
            task_id=self.task.pk,
            attempt=self.attempt,
            wake_at=wake_at,
            message=self.progress.take_pending(),
        )
        raise Suspend()
