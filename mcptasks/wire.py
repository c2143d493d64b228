"""The one serializer of a task's wire shape (``DetailedTask``), used by tasks/get,
notifications/tasks, the REST API and the dashboard alike.

It is viewer-aware: the task's owner (its principal) sees what their tool produced; anyone else
who may see the task — an operator, an auditor, a named viewer — sees the redacted form
(:func:`audit.redact.redact`, with the tool's declared sensitive names), size-capped like the
dashboard's: the status message, the input requests' params, the result and the error.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from audit.redact import redact, redact_text
from mcptasks import access
from mcptasks.models import Audience, InputRequest, InputState, Task, TaskState
from mcptasks.tools.context import declares_input_kind

S = TaskState
WIRE_STATUS = {
    S.QUEUED: "working",
    S.RUNNING: "working",
    S.SLEEPING: "working",
    S.AWAITING_INPUT: "input_required",
    S.AWAITING_OPERATOR: "working",
    S.NEEDS_RECONCILIATION: "working",
    S.COMPLETED: "completed",
    S.FAILED: "failed",
    S.CANCELLED: "cancelled",
}


def timestamp(value: datetime) -> str:
    return value.isoformat(timespec="milliseconds").replace("+00:00", "Z")


# The redacted form's size cap: a stub beyond it.
SHOWN_BYTES = 16_384


def shown(value: Any, sensitive_keys: frozenset[str] = frozenset()) -> Any:
    """A stored value as anyone but its owner may see it (the dashboard, other viewers'
    tasks/get): redacted and size-capped."""
    if value is None:
        return None
    return redact(value, sensitive_keys=sensitive_keys, max_bytes=SHOWN_BYTES)


def sensitive_keys_of(tool_name: str) -> frozenset[str]:
    """The argument names the task's tool declares secret."""
    from mcptasks.tools.registry import registry

    tool_def = registry.get(tool_name)
    return frozenset(tool_def.sensitive) if tool_def is not None else frozenset()


def task_fields(task: Task, *, owner_view: bool = False) -> dict[str, Any]:
    """The ``Task`` fields (no status payload); the status message redacted unless
    ``owner_view``. The redacted form is the default: a caller that does not say whom it
    answers shows nothing raw."""
    fields: dict[str, Any] = {
        "taskId": task.pk,
        "status": WIRE_STATUS[TaskState(task.state)],
        "createdAt": timestamp(task.created_at),
        "lastUpdatedAt": timestamp(task.updated_at),
        "ttlMs": task.ttl_ms,
        "pollIntervalMs": task.poll_interval_ms,
    }
    if task.status_message:
        fields["statusMessage"] = (
            task.status_message if owner_view else redact_text(task.status_message)
        )
    return fields


def input_requests_object(
    requests: list[InputRequest],
    *,
    owner_view: bool = True,
    sensitive: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    return {
        r.key: {
            "method": r.method,
            "params": r.params if owner_view else shown(r.params, sensitive),
        }
        for r in requests
    }


def detailed_task(
    task: Task, requests: list[InputRequest], *, owner_view: bool = False
) -> dict[str, Any]:
    """The ``DetailedTask`` for one viewer: ``requests`` are the pending input requests this
    viewer may answer (access.answerable_requests); ``owner_view`` says whether the viewer is
    the task's principal (the raw form) or anyone else (the redacted form)."""
    fields = task_fields(task, owner_view=owner_view)
    sensitive = frozenset() if owner_view else sensitive_keys_of(task.tool_name)
    status = fields["status"] = status_of(task, requests)
    if status == "input_required":
        fields["inputRequests"] = input_requests_object(
            requests, owner_view=owner_view, sensitive=sensitive
        )
    elif status == "completed":
        fields["result"] = task.result if owner_view else shown(task.result, sensitive)
    elif status == "failed":
        error = task.error or {"code": -32603, "message": "Task failed"}
        fields["error"] = error if owner_view else shown(error, sensitive)
    return fields


def is_owner(user: Any, task: Task) -> bool:
    """Whether ``user`` sees ``task`` as its owner (the raw form of :func:`detailed_task`)."""
    return user is not None and user.pk is not None and task.principal_id == user.pk


def status_of(task: Task, requests: list[InputRequest]) -> str:
    """The wire status of ``task`` for a viewer who may answer ``requests``: ``input_required``
    only while there is one (otherwise ``working``: nothing this viewer can answer)."""
    status = WIRE_STATUS[TaskState(task.state)]
    if status == "input_required" and not requests:
        return "working"
    return status


# Who answers on MCP: the client (its tasks/get lists these audiences' requests).
CLIENT_AUDIENCES = (Audience.CLIENT, Audience.ANY)


def answerable(
    pending: list[InputRequest], decisions: dict[int, access.Decision]
) -> list[InputRequest]:
    """Of ``pending`` (one task's pending requests), those a client may answer: a client
    audience and allowed by ``decisions`` (access.answer_decisions, by request pk)."""
    return [
        r
        for r in pending
        if r.state == InputState.PENDING and r.audience in CLIENT_AUDIENCES and decisions.get(r.pk)
    ]


def _client_requests(tasks: list[Task]) -> dict[str, list[InputRequest]]:
    """The pending client-audience requests of each of ``tasks``, oldest first, in one query."""
    pending: dict[str, list[InputRequest]] = {task.pk: [] for task in tasks}
    if tasks:
        for request in InputRequest.objects.filter(
            task_id__in=list(pending), state=InputState.PENDING, audience__in=CLIENT_AUDIENCES
        ).order_by("created_at", "id"):
            pending[request.task_id].append(request)
    return pending


def viewer_requests(
    user: Any, task: Task, capabilities: dict[str, Any] | None = None
) -> list[InputRequest]:
    """The pending input requests of ``task`` that ``user`` may answer as a client (the
    ``inputRequests`` of their tasks/get); with ``capabilities`` (those of the request that
    asks), only those that request declared it can take (§8 item 4)."""
    if task.state != TaskState.AWAITING_INPUT:
        return []
    pending = _client_requests([task])[task.pk]
    requests = answerable(pending, access.answer_decisions(user, task, pending))
    if capabilities is not None:
        requests = [
            r for r in requests if declares_input_kind(capabilities, r.method, r.params or {})
        ]
    return requests


def viewer_status(user: Any, task: Task) -> str:
    """The status ``user`` sees for ``task`` on every channel (MCP tasks/get, REST, dashboard,
    its live updates)."""
    return status_of(task, viewer_requests(user, task))


def viewer_statuses(user: Any, tasks: list[Task]) -> dict[str, str]:
    """:func:`viewer_status` of each of ``tasks`` (a page of rows), the pending requests of
    those awaiting input read in one query."""
    waiting = [task for task in tasks if task.state == TaskState.AWAITING_INPUT]
    pending = _client_requests(waiting)
    statuses = {task.pk: WIRE_STATUS[TaskState(task.state)] for task in tasks}
    for task in waiting:
        decisions = access.answer_decisions(user, task, pending[task.pk])
        statuses[task.pk] = status_of(task, answerable(pending[task.pk], decisions))
    return statuses


def detailed_for(
    user: Any, task: Task, capabilities: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The DetailedTask ``user`` sees (raw for its owner, redacted for anyone else), its
    ``inputRequests`` those of :func:`viewer_requests`."""
    return detailed_task(
        task, viewer_requests(user, task, capabilities), owner_view=is_owner(user, task)
    )
