"""``tasks/get``, ``tasks/update``, ``tasks/cancel`` (PROTOCOL §4.4–§4.6).

Unknown, expired and other principals' task ids answer the same -32602 through
:func:`visible_task` (access.task_for), the one path every method takes.
"""

from __future__ import annotations

from typing import Any

from mcptasks import access, lifecycle, limits, metrics, wire
from mcptasks.models import Audience, InputKind, InputRequest, InputState, Task
from mcptasks.protocol.call import Call
from mcptasks.protocol.errors import McpError, invalid_params
from mcptasks.tools.answers import InvalidAnswer, validate_response, verdict_of

ACK = {"resultType": "complete"}
# tasks/update's result _meta: for each key of inputResponses, whether this answer was the one
# recorded ("taken") or not ("not_taken": answered first by someone else, no longer pending, or
# never asked of this client). docs/api.md documents it.
INPUT_RESPONSES_META = "dev.mcptasks/inputResponses"
TASK_NOT_FOUND = "Failed to retrieve task: Task not found"
TAKEN, NOT_TAKEN = "taken", "not_taken"


def _visible_task(call: Call) -> Task:
    return visible_task(call.principal.user, call.params.get("taskId"), "params.taskId")


def visible_task(
    user: Any, task_id: Any, field: str = "taskId", action: access.Action = access.Action.VIEW
) -> Task:
    """The task ``user`` may do ``action`` to under ``task_id`` (access.task_for); -32602 for
    anything else: a task they may not see (counted) is "not found", one they may see but not do
    ``action`` to is refused with access's reason."""
    if not isinstance(task_id, str) or not task_id:
        raise invalid_params(f"{field} must be a non-empty string")
    try:
        return access.task_for(user, task_id, action)
    except access.TaskHidden:
        raise invalid_params(TASK_NOT_FOUND) from None
    except access.Refused as refused:
        raise invalid_params(refused.decision.reason) from None


@metrics.TASKS_GET_SECONDS.time()
def handle_tasks_get(call: Call) -> dict[str, Any]:
    """The general path (see mcp/fast_get.py for the event-loop one)."""
    metrics.TASKS_GET_GENERAL.inc()
    task = _visible_task(call)
    return {"resultType": "complete", **polled_view(call, task)}


def polled_view(call: Call, task: Task) -> dict[str, Any]:
    """The DetailedTask of one poll (throttled to the task's pollIntervalMs beyond a burst)."""
    limits.check_poll(
        principal_id=call.principal.user.pk,
        task_id=task.pk,
        poll_interval_ms=task.poll_interval_ms,
        version=task.version,
    )
    return wire.detailed_for(call.principal.user, task, call.capabilities)


def handle_tasks_update(call: Call) -> dict[str, Any]:
    responses = call.params.get("inputResponses")
    if not isinstance(responses, dict):
        raise invalid_params("params.inputResponses must be an object")
    user = call.principal.user
    try:
        task = _visible_task(call)
    except McpError:
        # An eligible reviewer who may not otherwise see the task reaches its gate (access).
        reviewed = access.task_for_reviewer(user, call.params.get("taskId"), list(responses))
        if reviewed is None:
            raise
        task = reviewed
    outstanding = {r.key: r for r in access.answerable_requests(user, task, channel="mcp")}
    # The gates among the keys: those outstanding say so themselves; only a key not
    # outstanding may name a gate this user may not decide on (asked only then).
    missing = [key for key in responses if key not in outstanding]
    gates = {k: r for k, r in outstanding.items() if r.kind == InputKind.APPROVAL}
    if missing:
        gates |= _pending_gates(task, missing)
    accepted: dict[str, dict[str, Any]] = {}
    for key, response in responses.items():
        request = outstanding.get(key)
        if request is None and key in gates:
            # A gate this client's user may not decide on: refused with access's reason, the
            # same as the dashboard and the REST API give.
            refusal = access.may_decide(user, gates[key], task)
            raise invalid_params(f"inputResponses[{key!r}]: {refusal.reason}", {"key": key})
        if request is None:
            continue  # never issued, answered, superseded or not this client's: ignored
        try:
            accepted[key] = validate_response(request.method, request.params, response)
            if key in gates:
                verdict_of(accepted[key])
        except InvalidAnswer as exc:
            raise invalid_params(f"inputResponses[{key!r}]: {exc}", {"key": key}) from None
    actor = access.actor(user, "mcp")
    statuses = dict.fromkeys(responses, NOT_TAKEN)
    for key, response in accepted.items():
        try:
            if key in gates:
                verdict, comment = verdict_of(response)
                lifecycle.task_decide_approval(
                    task_id=task.pk,
                    key=key,
                    reviewer=user,
                    verdict=verdict,
                    comment=comment,
                    actor=actor,
                    via="mcp",
                )
                statuses[key] = TAKEN
                continue
            lifecycle.task_answer_input(
                task_id=task.pk, key=key, response=response, actor=actor, via="mcp"
            )
        except lifecycle.DecisionRefused as exc:
            raise invalid_params(f"inputResponses[{key!r}]: {exc}", {"key": key}) from None
        except lifecycle.LifecycleError:
            continue  # answered concurrently, or the task moved on: nothing outstanding
        statuses[key] = TAKEN
    return {**ACK, "_meta": {INPUT_RESPONSES_META: statuses}}


def _pending_gates(task: Task, keys: list[Any]) -> dict[str, InputRequest]:
    """The pending client-audience approval gates of ``task`` among ``keys`` (those MCP
    carries; an operator gate's key is ignored on MCP like any request not this client's)."""
    return {
        r.key: r
        for r in task.input_requests.filter(
            kind=InputKind.APPROVAL,
            state=InputState.PENDING,
            audience=Audience.ANY,
            key__in=[str(k) for k in keys],
        )
    }


def handle_tasks_cancel(call: Call) -> dict[str, Any]:
    cancel_task(call.principal.user, _visible_task(call))
    return dict(ACK)


def cancel_task(user: Any, task: Task, reason: str = "tasks/cancel") -> None:
    """Ask to cancel ``task`` on behalf of ``user`` (-32602 when they may not); a terminal task
    is left as it is (idempotent)."""
    decision = access.can(user, access.Action.CANCEL, task)
    if not decision:
        raise invalid_params(f"Cannot cancel task: {decision.reason}")
    try:
        lifecycle.task_request_cancel(
            task_id=task.pk, actor=access.actor(user, "mcp"), reason=reason
        )
    except lifecycle.TaskNotFound:
        raise invalid_params("Failed to retrieve task: Task not found") from None
