"""MCP tasks/cancel of a task that already ended: the idempotent empty ack, nothing changed."""

from __future__ import annotations

import pytest

from audit.models import AuditEvent
from mcptasks.models import Task
from tests.protocol.conftest import CheckedClient

pytestmark = pytest.mark.django_db(transaction=True)


def test_mcp_cancel_of_an_ended_task_acks_and_changes_nothing(
    checked: CheckedClient, run_jobs
) -> None:
    created = checked.call("tools/call", {"name": "echo_task"}).result
    run_jobs()
    task = Task.objects.get(pk=created["taskId"])
    assert task.is_terminal
    audited = AuditEvent.objects.count()

    reply = checked.call("tasks/cancel", {"taskId": task.pk})

    assert {k: v for k, v in reply.result.items() if k != "_meta"} == {"resultType": "complete"}
    after = Task.objects.get(pk=task.pk)
    assert (after.state, after.version, after.cancel_requested_at) == (
        task.state,
        task.version,
        None,
    )
    assert AuditEvent.objects.count() == audited
