"""Tools of the REST API tests (imported by tests/api/conftest.py, enabled per test)."""

from __future__ import annotations

from mcptasks.tools import ToolContext, tool


@tool(policy="task", sensitive=frozenset({"launch_code"}))
def api_sensitive_args(ctx: ToolContext, service: str, launch_code: str = "") -> str:
    """Declares ``launch_code`` sensitive: the REST detail must redact it."""
    return service
