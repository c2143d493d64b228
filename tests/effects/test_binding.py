"""Binding on resume (issue 6, DESIGN §4): a task resumed under another server build follows its
tool's rule — continue and audit the change (the default), or fail with a clear error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from mcptasks.models import Task
from mcptasks.runner import run_task

pytestmark = pytest.mark.django_db(transaction=True)

OLD_BUILD = "1.0.0+aaaaaaa"
NEW_BUILD = "1.1.0+bbbbbbb"
GO = {"go": {"action": "accept", "content": {"ok": True}}}


@pytest.fixture
def paused_under_old_build(
    settings: Any, run_jobs: Any, mcp_for: Callable[[str], Any]
) -> Callable[[str], str]:
    """``paused(tool)`` → alice's task of ``tool``, created and run under the old build until
    it asks; then the server is upgraded and alice answers (the task is queued again)."""

    def paused(tool: str) -> str:
        settings.MCPTASKS_SERVER_BUILD = OLD_BUILD
        alice = mcp_for("alice")
        task_id: str = alice.tool(tool, {}).result["taskId"]
        assert run_task(task_id) == "awaiting_input"
        settings.MCPTASKS_SERVER_BUILD = NEW_BUILD
        alice.call("tasks/update", {"taskId": task_id, "inputResponses": GO})
        assert Task.objects.get(pk=task_id).state == "queued"
        return task_id

    return paused


def test_resume_under_another_build_continues_and_is_audited(
    paused_under_old_build: Callable[[str], str],
    audit_of: Callable[..., list[tuple[str, str, dict[str, Any]]]],
) -> None:
    task_id = paused_under_old_build("resume_across_builds")
    assert audit_of(task_id, "task.binding_changed") == []  # the first run: same build
    assert run_task(task_id) == "completed"
    task = Task.objects.get(pk=task_id)
    assert task.result["content"][0]["text"] == "resumed"
    assert task.server_build == OLD_BUILD  # the binding it was created with stays on record
    assert [data["changes"] for _, _, data in audit_of(task_id, "task.binding_changed")] == [
        {"server_build": [OLD_BUILD, NEW_BUILD]}
    ]


def test_a_tool_that_refuses_another_build_fails_with_a_clear_error(
    paused_under_old_build: Callable[[str], str],
    mcp_for: Callable[[str], Any],
    audit_of: Callable[..., list[tuple[str, str, dict[str, Any]]]],
) -> None:
    task_id = paused_under_old_build("resume_same_build_only")
    assert run_task(task_id) == "failed"
    error = mcp_for("alice").call("tasks/get", {"taskId": task_id}).result["error"]
    assert OLD_BUILD in error["message"]
    assert "'resume_same_build_only' refuses to resume under a different build" in error["message"]
    assert audit_of(task_id, "task.binding_changed") == []
    assert [data["state"] for _, _, data in audit_of(task_id, "task.failed")] == ["failed"]
