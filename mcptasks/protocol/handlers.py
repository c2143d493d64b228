"""The method table and the discovery methods. Plain Python apart from the handlers' reads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings

from mcptasks.protocol.call import SUPPORTED_VERSIONS, TASKS_EXTENSION, Call
from mcptasks.protocol.errors import invalid_params
from mcptasks.protocol.tasks import handle_tasks_cancel, handle_tasks_get, handle_tasks_update
from mcptasks.protocol.tools_call import handle_tools_call
from mcptasks.tools.registry import registry

INSTRUCTIONS = (
    "mcptasks runs long tools as durable tasks (io.modelcontextprotocol/tasks). Declare the "
    "extension in clientCapabilities to receive task handles; poll tasks/get no faster than "
    "pollIntervalMs, answer inputRequests with tasks/update, stop work with tasks/cancel. "
    'To retry a tools/call safely, put a unique string under _meta["dev.mcptasks/'
    'idempotencyKey"]: the same key with the same arguments returns the same task (for 24 h).'
)


def handle_server_discover(call: Call) -> dict[str, Any]:
    return {
        "resultType": "complete",
        "supportedVersions": list(SUPPORTED_VERSIONS),
        "capabilities": {"tools": {}, "extensions": {TASKS_EXTENSION: {}}},
        "instructions": INSTRUCTIONS,
        "ttlMs": 300_000,
        "cacheScope": "public",
    }


def handle_tools_list(call: Call) -> dict[str, Any]:
    cursor = call.params.get("cursor")
    if cursor is not None:
        # One page holds every tool, so no cursor this server issued exists.
        raise invalid_params("Invalid cursor")
    return {
        "resultType": "complete",
        "tools": [tool_def.wire() for tool_def in registry.all()],
        "ttlMs": 60_000,
        "cacheScope": "private",
    }


Handler = Callable[[Call], dict[str, Any]]

METHODS: dict[str, Handler] = {
    "server/discover": handle_server_discover,
    "tools/list": handle_tools_list,
    "tools/call": handle_tools_call,
    "tasks/get": handle_tasks_get,
    "tasks/update": handle_tasks_update,
    "tasks/cancel": handle_tasks_cancel,
}

# Methods gated on the tasks extension being declared on this request.
TASK_METHODS = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})


def server_info() -> dict[str, str]:
    return {"name": "mcptasks", "version": settings.MCPTASKS_VERSION}
