"""The method table and the discovery methods. Plain Python apart from the handlers' reads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings

from mcptasks.protocol import task_tools
from mcptasks.protocol.call import PROTOCOL_VERSION, SUPPORTED_VERSIONS, TASKS_EXTENSION, Call
from mcptasks.protocol.errors import METHOD_NOT_FOUND, McpError, invalid_params, missing_capability
from mcptasks.protocol.tasks import handle_tasks_cancel, handle_tasks_get, handle_tasks_update
from mcptasks.protocol.tools_call import handle_tools_call

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
        "tools": task_tools.tool_list(),
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


REMOVED_METHODS = frozenset(
    {
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
        "tasks/result",
        "tasks/list",
        "notifications/initialized",
    }
)
LISTEN = "subscriptions/listen"


def _declares_tasks(capabilities: dict[str, Any]) -> bool:
    extensions = capabilities.get("extensions")
    return isinstance(extensions, dict) and TASKS_EXTENSION in extensions


def gate(method: str, params: dict[str, Any], capabilities: dict[str, Any]) -> Handler | None:
    """The handler of ``method``, once the method is known and the capabilities it needs are
    declared on this request (runs after authentication); None for ``subscriptions/listen``."""
    handler = METHODS.get(method)
    if method == LISTEN:
        notifications = params.get("notifications")
        if (
            isinstance(notifications, dict)
            and notifications.get("taskIds") not in (None, False)
            and not _declares_tasks(capabilities)
        ):
            raise missing_capability(
                {"extensions": {TASKS_EXTENSION: {}}},
                "taskIds in subscriptions/listen need the extension",
            )
        return None
    if handler is None or method in REMOVED_METHODS:
        hint = ""
        if method == "initialize":
            hint = f"; this server speaks protocol {PROTOCOL_VERSION} only (no initialize)"
        raise McpError(METHOD_NOT_FOUND, f"Method not found: {method}{hint}")
    if method in TASK_METHODS and not _declares_tasks(capabilities):
        raise missing_capability(
            {"extensions": {TASKS_EXTENSION: {}}},
            f"{method} needs the {TASKS_EXTENSION} extension",
        )
    return handler


def server_info() -> dict[str, str]:
    return {"name": "mcptasks", "version": settings.MCPTASKS_VERSION}
