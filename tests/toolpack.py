"""Tools used by the tests only (loaded through MCPTASKS_TOOL_PACKS in tests/conftest.py)."""

from __future__ import annotations

from typing import Any

from mcptasks.tools import ToolContext, ToolError, tool


@tool(policy="task")
def echo_task(ctx: ToolContext, text: str = "hi") -> str:
    """Return the text as a task."""
    return text


@tool(policy="task")
def tool_error_task(ctx: ToolContext) -> str:
    """Fail with a tool error."""
    raise ToolError("business failure")


@tool(policy="task")
def ask_twice(ctx: ToolContext) -> dict[str, Any]:
    """Ask two questions at once and return the answers."""
    answers = ctx.ask_many({
        "name": ctx_question("Your name?", {"name": {"type": "string"}}),
        "confirm": ctx_question("Sure?", {"confirm": {"type": "boolean"}}),
    })
    return {key: answer.content for key, answer in answers.items()}


def ctx_question(message: str, properties: dict[str, Any]) -> Any:
    from mcptasks.tools import Question

    return Question(message=message, schema={"type": "object", "properties": properties})
