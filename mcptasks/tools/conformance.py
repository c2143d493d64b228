"""Fixture tools of the official conformance suite's tasks scenarios (CONFORMANCE.md §3).

Loaded only in conformance mode. Each is an ordinary tool of the tool API.
"""

from __future__ import annotations

from typing import Any

from mcptasks.tools import Question, ToolContext, ToolError, tool

FIXTURE: dict[str, Any] = {"ttl_ms": 300_000, "poll_interval_ms": 500}


@tool(policy="sync")
def greet(ctx: ToolContext, name: str = "World") -> str:
    """Say hello (always answered inline)."""
    return f"Hello, {name}!"


@tool(policy="auto", **FIXTURE)
def slow_compute(ctx: ToolContext, seconds: int = 1, label: str = "") -> str:
    """Wait `seconds` on a durable timer, then answer; a task when the client allows one."""
    if seconds < 0 or seconds > 3600:
        raise ToolError("seconds must be between 0 and 3600")
    ctx.sleep("compute", seconds)
    return f"Computed {label or 'result'} in {seconds}s"


@tool(policy="task", **FIXTURE)
def failing_job(ctx: ToolContext) -> str:
    """A task that ends with a tool error (isError: true), never a protocol error."""
    ctx.sleep("work", 1)
    raise ToolError("Job failed: the simulated backend reported an error")


@tool(policy="task", **FIXTURE)
def protocol_error_job(ctx: ToolContext) -> str:
    """A task whose handler crashes: it ends failed with a JSON-RPC error."""
    ctx.sleep("work", 0.5)
    raise RuntimeError("simulated handler crash")


# `auto`, not `task`: the suite's header checks (http-header-validation) call the first tool of
# tools/list — this one, in name order — with no arguments and no tasks extension, and need a
# result; inline, the question goes out as an MRTR InputRequiredResult. The tasks scenarios always
# declare the extension, so they still get a task.
@tool(policy="auto", **FIXTURE)
def confirm_delete(ctx: ToolContext, filename: str = "file.txt") -> str:
    """Ask for confirmation, then delete (pretend)."""
    answer = ctx.ask(
        "confirm",
        f"Delete {filename}?",
        {
            "type": "object",
            "properties": {"confirm": {"type": "boolean", "title": "Confirm"}},
            "required": ["confirm"],
        },
    )
    if answer.accepted and answer.content.get("confirm"):
        return f"deleted '{filename}'"
    return f"kept '{filename}'"


@tool(policy="task", **FIXTURE)
def multi_input(ctx: ToolContext) -> str:
    """Ask two questions at once; finish when both are answered."""
    answers = ctx.ask_many(
        {
            "name": Question(
                message="What is your name?",
                schema={"type": "object", "properties": {"name": {"type": "string"}}},
            ),
            "confirm": Question(
                message="Proceed?",
                schema={"type": "object", "properties": {"confirm": {"type": "boolean"}}},
            ),
        }
    )
    name = answers["name"].content.get("name", "")
    return f"Hello, {name}! confirmed={answers['confirm'].content.get('confirm')}"


@tool(policy="task", asks_before_task=True, **FIXTURE)
def test_tool_with_task(ctx: ToolContext) -> dict[str, Any]:
    """Ask for a name before the task exists (MRTR), then compute in a task."""
    answer = ctx.ask(
        "user_name",
        "What is your name?",
        {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        before_task=True,
    )
    ctx.sleep("compute", 0.2)
    name = answer.content.get("name", "stranger")
    return {"content": [{"type": "text", "text": f"Hello, {name}! (computed in task)"}]}
