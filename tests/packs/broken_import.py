"""A tool pack that does not import (a dependency it needs is missing)."""

from __future__ import annotations

from mcptasks_missing_dependency import checkout  # type: ignore[import-not-found]  # noqa: F401

from mcptasks.tools import ToolContext, tool


@tool(policy="task")
def never_registered(ctx: ToolContext) -> str:
    """Would run if the pack imported."""
    return "unreachable"
