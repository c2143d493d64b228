"""A tool pack whose tool declares limits its own TTL cannot hold."""

from __future__ import annotations

from mcptasks.tools import ToolContext, tool


@tool(policy="task", ttl_ms=60_000, max_run_s=300)
def outlived_by_its_limits(ctx: ToolContext) -> str:
    """Its tasks would expire before max_run_s ran out."""
    return "unreachable"
