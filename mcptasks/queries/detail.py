"""The task page: what it shows of a task beyond the doorway (``access.task_for`` fetches and
decides; this assembles the detail: inputs, effects, timeline, the rights the page offers)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from audit.models import AuditEvent
from audit.redact import redact_text
from mcptasks import access, inputs, wire
from mcptasks import timeline as task_timeline
from mcptasks.models import Effect, InputRequest, InputState, Task, TaskState

TIMELINE_LIMIT = 500


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

# What the task page shows of a task's relations: ``access.task_for(user, id, related=...)``.
DETAIL_RELATED = ("principal", "token", "cancel_requested_by")


def find_task(user: Any, task_id: Any, related: tuple[str, ...] = ()) -> Task | None:
    """:func:`access.task_for` (view) as ``None`` for a hidden task — a thin alias kept for the
    callers not yet moved onto the doorway (the MCP handlers, the REST API)."""
    try:
        return access.task_for(user, task_id, related=related)
    except access.TaskHidden:
        return None


def get_task(user: Any, task_id: Any) -> Task | None:
    """:func:`find_task` with what the task page shows of its relations (:data:`DETAIL_RELATED`)."""
    return find_task(user, task_id, DETAIL_RELATED)


def task_detail(user: Any, task: Task) -> TaskDetail:
    """Everything the detail page shows of a task ``user`` may see (access checked by the
    caller with ``access.task_for(user, task_id, related=DETAIL_RELATED)``)."""
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
