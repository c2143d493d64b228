"""Task-mode elicitation follows the same rules as inline: no secrets in forms, and only the
elicitation modes the creating request declared."""

from __future__ import annotations

import pytest

from mcptasks import runner
from mcptasks.models import TaskState

pytestmark = pytest.mark.django_db(transaction=True)


def test_task_form_asking_for_a_secret_fails_as_misdefined(make_task):
    task = make_task(tool_name="asks_for_a_password")
    assert runner.run_task(task.pk) == TaskState.FAILED
    task.refresh_from_db()
    assert "must never request secrets" in task.error["message"]
    assert not task.input_requests.exists()


def test_url_only_elicitation_client_is_never_sent_a_form(make_task):
    task = make_task(
        tool_name="ask_twice",
        client_capabilities={
            "elicitation": {"url": {}},
            "extensions": {"io.modelcontextprotocol/tasks": {}},
        },
    )
    assert runner.run_task(task.pk) == TaskState.FAILED
    task.refresh_from_db()
    assert task.error["code"] == -32021
    assert not task.input_requests.exists()
