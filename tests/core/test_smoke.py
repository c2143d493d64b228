from __future__ import annotations

import pytest

from mcptasks import runner
from mcptasks.models import TaskState

pytestmark = pytest.mark.django_db(transaction=True)


def test_task_tool_runs_to_completion(make_task):
    task = make_task(tool_name="echo_task", arguments={"text": "hello"})
    state = runner.run_task(task.pk)
    task.refresh_from_db()
    assert state == TaskState.COMPLETED, task.error
    task.refresh_from_db()
    assert task.result["content"][0]["text"] == "hello"
