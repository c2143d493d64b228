"""The method table: each MCP method's handler (they read and write the models), gated by the
codec's rules (mcptasks/protocol/methods.py)."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from mcptasks.mcp import task_tools
from mcptasks.mcp.tasks import handle_tasks_cancel, handle_tasks_get, handle_tasks_update
from mcptasks.mcp.tools_call import handle_tools_call
from mcptasks.protocol import methods
from mcptasks.protocol.call import Call
from mcptasks.protocol.errors import invalid_params
from mcptasks.protocol.methods import LISTEN, Handler

__all__ = ["LISTEN", "METHODS", "gate", "server_info"]


def handle_tools_list(call: Call) -> dict[str, Any]:
    cursor = call.params.get("cursor")
    if cursor is not None:
        # One page holds every tool, so no cursor this server issued exists.
        raise invalid_params("Invalid cursor")
    return {
        "resultType": "complete",
        "tools": task_tools.tool_list(),
        "ttlMs": 60_000,
        "cacheScope": "private",
    }


METHODS: dict[str, Handler] = {
    "server/discover": methods.handle_server_discover,
    "tools/list": handle_tools_list,
    "tools/call": handle_tools_call,
    "tasks/get": handle_tasks_get,
    "tasks/update": handle_tasks_update,
    "tasks/cancel": handle_tasks_cancel,
}


def gate(method: str, params: dict[str, Any], capabilities: dict[str, Any]) -> Handler | None:
    """:func:`methods.gate` over this server's table."""
    return methods.gate(method, params, capabilities, METHODS)


def server_info() -> dict[str, str]:
    return methods.server_info(settings.MCPTASKS_VERSION)
