"""A binding change is audited once, not at every later resume under the new build."""

from __future__ import annotations

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from mcptasks import lifecycle, runner
from mcptasks.models import Task, TaskState

pytestmark = pytest.mark.django_db(transaction=True)


def wake(task_id: str) -> None:
    Task.objects.filter(pk=task_id).update(wake_at=timezone.now())
    lifecycle.task_wake(task_id=task_id)


def test_binding_change_is_audited_once_across_resumes(make_task, settings):
    task = make_task(
        tool_name="run_pipeline", arguments={"pipeline": "p", "stages": 3, "stage_seconds": 60}
    )
    settings.MCPTASKS_SERVER_BUILD = "1.0.0+old"
    from mcptasks.tools.registry import registry

    Task.objects.filter(pk=task.pk).update(
        server_build="1.0.0+old", policy_revision=registry.get("run_pipeline").policy_revision
    )
    assert runner.run_task(task.pk) == TaskState.SLEEPING
    settings.MCPTASKS_SERVER_BUILD = "1.1.0+new"
    for _ in range(2):
        wake(task.pk)
        assert runner.run_task(task.pk) == TaskState.SLEEPING
    events = AuditEvent.objects.filter(task_id=task.pk, action="task.binding_changed")
    assert events.count() == 1
    assert Task.objects.get(pk=task.pk).server_build == "1.0.0+old"
