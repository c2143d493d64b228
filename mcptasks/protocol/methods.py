"""The method table's rules over plain data: which methods exist, which were removed, which need
the tasks extension, and the discovery result. The handlers themselves are the adapter's
(mcptasks/mcp/handlers.py), which hands its table to :func:`gate`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from mcptasks.protocol.call import PROTOCOL_VERSION, SUPPORTED_VERSIONS, TASKS_EXTENSION, Call
from mcptasks.protocol.errors import METHOD_NOT_FOUND, McpError, missing_capability

SERVER_NAME = "mcptasks"

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


Handler = Callable[[Call], dict[str, Any]]

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


def gate(
    method: str,
    params: dict[str, Any],
    capabilities: dict[str, Any],
    methods: Mapping[str, Handler],
) -> Handler | None:
    """The handler of ``method`` in ``methods``, once the method is known and the capabilities it
    needs are declared on this request (runs after authentication); None for
    ``subscriptions/listen``."""
    handler = methods.get(method)
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


def server_info(version: str) -> dict[str, str]:
    return {"name": SERVER_NAME, "version": version}
