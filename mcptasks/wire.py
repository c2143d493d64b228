"""The one serializer of a task's wire shape (``DetailedTask``), used by tasks/get,
notifications/tasks, the REST API and the dashboard alike."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from mcptasks.models import InputRequest, Task, TaskState

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


def task_fields(task: Task) -> dict[str, Any]:
    """The ``Task`` fields (no status payload)."""
    fields: dict[str, Any] = {
        "taskId": task.pk,
        "status": WIRE_STATUS[TaskState(task.state)],
        "createdAt": timestamp(task.created_at),
        "lastUpdatedAt": timestamp(task.updated_at),
        "ttlMs": task.ttl_ms,
        "pollIntervalMs": task.poll_interval_ms,
    }
    if task.status_message:
        fields["statusMessage"] = task.status_message
    return fields


def input_requests_object(requests: list[InputRequest]) -> dict[str, Any]:
    return {r.key: {"method": r.method, "params": r.params} for r in requests}


def detailed_task(task: Task, requests: list[InputRequest]) -> dict[str, Any]:
    """The ``DetailedTask`` for one viewer: ``requests`` are the pending input requests this
    viewer may answer (access.answerable_requests)."""
    fields = task_fields(task)
    status = fields["status"]
    if status == "input_required":
        if requests:
            fields["inputRequests"] = input_requests_object(requests)
        else:
            fields["status"] = "working"  # nothing this viewer can answer
    elif status == "completed":
        fields["result"] = task.result
    elif status == "failed":
        fields["error"] = task.error or {"code": -32603, "message": "Task failed"}
    return fields
