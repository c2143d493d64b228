"""The task fallback for clients without the tasks extension: an ordinary CallToolResult naming
the task, and task_status / task_cancel answering from the same store under the same access
rules (issue 25). The default for ``task`` tools stays -32021."""

from __future__ import annotations

import time
from typing import Any

import pytest

from audit.models import AuditEvent
from mcptasks import sweeps
from mcptasks.models import Task, TaskState
from mcptasks.tools import ToolContext
from mcptasks.tools.registry import ToolDef, ToolRegistrationError, registry
from tests.protocol.conftest import McpClient, validate

pytestmark = pytest.mark.django_db(transaction=True)

NO_EXTENSION: dict[str, Any] = {"elicitation": {}}


def fallback_call(client: McpClient, seconds: float = 0.1) -> dict[str, Any]:
    reply = client.tool("nap_with_fallback", {"seconds": seconds}, capabilities=NO_EXTENSION)
    assert reply.status == 200, reply.body
    return reply.result


def task_tool(client: McpClient, name: str, arguments: Any) -> dict[str, Any]:
    reply = client.tool(name, arguments, capabilities=NO_EXTENSION)
    assert reply.status == 200, reply.body
    validate("CallToolResult", reply.result)
    return reply.result


def test_a_fallback_tool_answers_a_call_tool_result_naming_the_task_and_the_next_steps(mcp):
    result = fallback_call(mcp)
    validate("CallToolResult", result)
    assert result["resultType"] == "complete" and "isError" not in result
    assert "taskId" not in result and "status" not in result  # never a CreateTaskResult
    task_id = result["structuredContent"]["taskId"]
    assert result["structuredContent"]["status"] == "working"
    assert result["structuredContent"]["next"] == {
        "status": {"tool": "task_status", "arguments": {"taskId": task_id}},
        "cancel": {"tool": "task_cancel", "arguments": {"taskId": task_id}},
    }
    text = result["content"][0]["text"]
    assert task_id in text and "task_status" in text and "task_cancel" in text
    assert Task.objects.get(pk=task_id).tool_name == "nap_with_fallback"


def test_task_status_reports_working_then_the_result(mcp, run_jobs):
    task_id = fallback_call(mcp)["structuredContent"]["taskId"]
    working = task_tool(mcp, "task_status", {"taskId": task_id})
    assert working["structuredContent"]["status"] == "working"
    assert f"Task {task_id} is working." in working["content"][0]["text"]
    run_jobs()  # runs up to the durable 0.1 s sleep
    for _ in range(50):
        time.sleep(0.05)
        sweeps.wake_timers()
        run_jobs()
        if Task.objects.get(pk=task_id).state == TaskState.COMPLETED:
            break
    done = task_tool(mcp, "task_status", {"taskId": task_id})
    assert done["structuredContent"]["status"] == "completed"
    assert done["content"][0]["text"].startswith(f"Task {task_id} is completed.")
    assert done["content"][1] == {"type": "text", "text": "napped 0.1s"}
    assert done["structuredContent"]["result"]["content"] == [done["content"][1]]


def test_task_cancel_cancels_through_the_lifecycle(mcp):
    task_id = fallback_call(mcp, seconds=60)["structuredContent"]["taskId"]
    result = task_tool(mcp, "task_cancel", {"taskId": task_id})
    assert "isError" not in result
    assert result["content"][0]["text"].startswith("Cancellation requested")
    task = Task.objects.get(pk=task_id)
    assert task.cancel_requested_at is not None
    event = AuditEvent.objects.get(task_id=task_id, action="task.cancel_requested")
    assert event.data["reason"] == "task_cancel tool"
    again = task_tool(mcp, "task_cancel", {"taskId": task_id})  # idempotent
    assert "isError" not in again


@pytest.mark.parametrize("tool", ["task_status", "task_cancel"])
def test_another_principals_task_is_answered_like_an_unknown_one(mcp, mcp_for, tool):
    task_id = fallback_call(mcp, seconds=60)["structuredContent"]["taskId"]
    foreign = task_tool(mcp_for("bob"), tool, {"taskId": task_id})
    unknown = task_tool(mcp_for("bob"), tool, {"taskId": "no-such-task"})
    assert foreign["isError"] is True and unknown["isError"] is True
    assert foreign["content"] == unknown["content"]
    assert "not found" in foreign["content"][0]["text"]
    assert Task.objects.get(pk=task_id).cancel_requested_at is None


@pytest.mark.parametrize("arguments", [{}, {"taskId": ""}, {"taskId": 5}, {"taskId": "x", "y": 1}])
def test_task_tools_refuse_bad_arguments_with_a_tool_error(mcp, arguments):
    result = task_tool(mcp, "task_status", arguments)
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith("Invalid arguments for task_status")


def test_a_task_tool_without_the_fallback_still_needs_the_extension(mcp):
    reply = mcp.tool("echo_task", {"text": "x"}, capabilities=NO_EXTENSION)
    assert reply.status == 400 and reply.error["code"] == -32021


def test_a_client_with_the_extension_gets_the_ordinary_create_task_result(mcp):
    reply = mcp.tool("nap_with_fallback", {"seconds": 0.1})
    validate("CreateTaskResult", reply.result, ext=True)
    assert reply.result["resultType"] == "task"


def test_tools_list_offers_the_task_tools_while_a_tool_opts_in(mcp):
    tools = {t["name"]: t for t in mcp.call("tools/list").result["tools"]}
    assert tools["task_status"]["inputSchema"]["required"] == ["taskId"]
    assert "task_cancel" in tools
    names = list(tools)
    assert names == sorted(names)


@pytest.mark.parametrize(
    "name,policy,fallback",
    [("task_status", "task", False), ("task_cancel", "sync", False), ("x_auto", "auto", True)],
)
def test_registration_refuses_reserved_names_and_a_fallback_on_non_task_tools(
    name, policy, fallback
):
    def fn(ctx: ToolContext) -> str:
        return ""

    with pytest.raises(ToolRegistrationError):
        registry.register(
            ToolDef(
                name=name,
                fn=fn,
                description="d",
                input_schema={"type": "object"},
                policy=policy,
                task_fallback=fallback,
            )
        )
