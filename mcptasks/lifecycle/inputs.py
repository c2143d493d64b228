"""Input requests: asking, answering, approval decisions and deadlines."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from audit.record import Actor
from mcptasks.inputs import secret_fields
from mcptasks.lifecycle._core import (
    AWAITING_STATES,
    RELEASED_LEASE,
    DecisionRefused,
    InputNotPending,
    InvalidTransition,
    LifecycleError,
    S,
    TaskNotFound,
    _apply,
    _audit,
    _changed,
    _fence,
    _leave_open_effects,
    _run_on_commit,
    _supersede_pending,
    error_object,
)
from mcptasks.lifecycle.cancel import _after_suspend
from mcptasks.models import (
    ApprovalDecision,
    Audience,
    GateOutcome,
    InputKind,
    InputRequest,
    InputState,
    Task,
)
from mcptasks.tools import answers


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
        task = Task.objects.select_related("tenant", "token").get(pk=task_id)
        issuer = task.token_issuer_id()
        InputRequest.objects.bulk_create(
            [
                InputRequest(
                    task_id=task_id,
                    tenant_id=task.tenant_id,
                    principal_id=task.principal_id,
                    token_issuer_id=issuer,
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
            **RELEASED_LEASE,
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


class InvalidAnswer(LifecycleError):
    """The answer does not fit the request it answers (its method's shape, the schema it asked
    for, an approval's verdict); the message says why. Nothing was written."""


def validated_answer(
    *, method: str, params: dict[str, Any], response: Any, kind: str = InputKind.FORM
) -> dict[str, Any]:
    """The one rule for an answer to an input request, whatever the channel: the response as it
    is stored, or :class:`InvalidAnswer` with the reason (tools/answers.py checks the shape and
    the schema; an approval gate's answer also needs a verdict, and a reject a comment).

    :func:`task_answer_input` enforces it; channels that check a batch before writing any of it
    (tasks/update) call it first."""
    try:
        accepted = answers.validate_response(method, params, response)
        if kind == InputKind.APPROVAL:
            answers.verdict_of(accepted)
    except answers.InvalidAnswer as exc:
        raise InvalidAnswer(str(exc)) from None
    return accepted


def task_answer_input(
    *, task_id: str, key: str, response: dict[str, Any], actor: Actor, via: str
) -> Task:
    """Store the answer to one pending input request; resume the task once none is pending.

    Raises :class:`InputNotPending` if the key is not pending, :class:`InvalidAnswer` if the
    answer does not fit the request (:func:`validated_answer`), :class:`InvalidTransition` if
    the task is not waiting for input. Authorization is the caller's job (access.py).
    """
    with transaction.atomic():
        _lock_awaiting(task_id, "answer_input")
        request = InputRequest.objects.filter(
            task_id=task_id, key=key, state=InputState.PENDING, kind=InputKind.FORM
        ).first()
        if request is None:
            raise InputNotPending(key)
        # Refused here whatever the channel; stored as the channel passed it (the checked form
        # validated_answer returns, plus any ``_meta`` notes of the channel's, as the dashboard's).
        validated_answer(method=request.method, params=request.params, response=response)
        if (
            InputRequest.objects.filter(pk=request.pk, state=InputState.PENDING).update(
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
        _audit(
            task,
            "task.input_answered",
            actor,
            {"key": key, "via": via, "action": response.get("action"), "response": response},
            sensitive_keys=secret_fields(request.params),
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
            _supersede_pending(task_id)
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
