"""The task fallback for clients without the tasks extension (most hosts today).

A ``task`` tool declared with ``task_fallback=True`` still runs as a durable task when the
request did not declare ``io.modelcontextprotocol/tasks``; instead of ``-32021`` the call answers
an ordinary ``CallToolResult`` (``resultType: "complete"``, never a ``CreateTaskResult``) that
carries the task id and what to do next. Two tools, served while any configured tool opts in,
answer from the same durable store with the same access rules as ``tasks/get`` and
``tasks/cancel``: ``task_status`` (the DetailedTask, throttled to ``pollIntervalMs`` like a poll)
and ``task_cancel`` (cooperative cancellation through the lifecycle).
"""

from __future__ import annotations

from typing import Any

from mcptasks import wire
from mcptasks.mcp.tasks import cancel_task, polled_view, visible_task
from mcptasks.models import Task
from mcptasks.protocol.call import Call
from mcptasks.protocol.errors import INVALID_PARAMS, McpError
from mcptasks.tools.answers import offline_validator
from mcptasks.tools.registry import FALLBACK_TOOL_NAMES, ToolDef, registry

TASK_CANCEL, TASK_STATUS = FALLBACK_TOOL_NAMES
TASK_ID_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"taskId": {"type": "string", "minLength": 1, "description": "The task id"}},
    "required": ["taskId"],
    "additionalProperties": False,
}
DEFINITIONS: dict[str, dict[str, Any]] = {
    TASK_STATUS: {
        "name": TASK_STATUS,
        "description": (
            "The status of a background task started by another tool of this server, and its "
            "result once it is done. Call it no more often than the task's poll interval."
        ),
        "inputSchema": TASK_ID_SCHEMA,
        "annotations": {"readOnlyHint": True, "idempotentHint": True},
    },
    TASK_CANCEL: {
        "name": TASK_CANCEL,
        "description": (
            "Ask a background task started by another tool of this server to stop "
            "(cooperative: it ends cancelled at its next safe point)."
        ),
        "inputSchema": TASK_ID_SCHEMA,
        "annotations": {"destructiveHint": True, "idempotentHint": True},
    },
}


def offered() -> bool:
    """True while any configured tool opts in to the fallback."""
    return any(tool_def.task_fallback for tool_def in registry.all())


def tool_list() -> list[dict[str, Any]]:
    """Every ``Tool`` of ``tools/list``, the fallback tools included when offered, by name."""
    tools = [tool_def.wire() for tool_def in registry.all()]
    if offered():
        tools += DEFINITIONS.values()
    return sorted(tools, key=lambda tool: str(tool["name"]))


def _text(text: str, structured: dict[str, Any], is_error: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {
        "resultType": "complete",
        "content": [{"type": "text", "text": text}],
        "structuredContent": structured,
    }
    if is_error:
        result["isError"] = True
    return result


def _next_steps(task_id: str) -> dict[str, Any]:
    arguments = {"taskId": task_id}
    return {
        "status": {"tool": TASK_STATUS, "arguments": arguments},
        "cancel": {"tool": TASK_CANCEL, "arguments": arguments},
    }


def started(task: Task, tool_def: ToolDef) -> dict[str, Any]:
    """The CallToolResult that answers a fallback call: the task id and what to do next."""
    fields = wire.task_fields(task)
    poll_s = task.poll_interval_ms / 1000
    text = (
        f"Started task {task.pk} for {tool_def.name}; it runs in the background. "
        f'Call {TASK_STATUS} with {{"taskId": "{task.pk}"}} for its status and, once it is '
        f"done, its result (no more often than every {poll_s:g} s); call {TASK_CANCEL} with "
        "the same taskId to stop it."
    )
    return _text(text, {**fields, "next": _next_steps(task.pk)})


def call_tool(call: Call, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """``task_status`` / ``task_cancel``: a tool error for bad arguments or a task the caller
    cannot see (the same answer for unknown and foreign ids), else the task's view."""
    errors = list(offline_validator(TASK_ID_SCHEMA).iter_errors(arguments))
    if errors:
        return _text(f"Invalid arguments for {name}: {errors[0].message}", {}, is_error=True)
    user = call.principal.user
    try:
        task = visible_task(user, arguments["taskId"])
        if name == TASK_CANCEL:
            cancel_task(user, task, reason=f"{TASK_CANCEL} tool")
            task = visible_task(user, task.pk)
        view = polled_view(call, task) if name == TASK_STATUS else wire.task_fields(task)
    except McpError as exc:
        if exc.code != INVALID_PARAMS:
            raise
        return _text(exc.message, {}, is_error=True)
    return _described(task.pk, view, cancelled=name == TASK_CANCEL)


def _described(task_id: str, view: dict[str, Any], *, cancelled: bool) -> dict[str, Any]:
    status = view["status"]
    lines = [f"Task {task_id} is {status}."]
    if cancelled:
        lines[0] = f"Cancellation requested: task {task_id} is {status}."
    if view.get("statusMessage"):
        lines.append(str(view["statusMessage"]))
    content: list[dict[str, Any]] = []
    if status == "completed":
        result = view.get("result") or {}
        lines.append(
            "Its result follows." if not result.get("isError") else "It ended with an error:"
        )
        content = list(result.get("content") or [])
    elif status == "failed":
        error = view.get("error") or {}
        lines.append(f"It failed: {error.get('message', 'unknown error')}")
    elif status == "input_required":
        questions = [r["params"].get("message", "") for r in view.get("inputRequests", {}).values()]
        lines.append(
            "It waits for input that needs a client with the tasks extension (tasks/update) or "
            "the operator dashboard: " + "; ".join(q for q in questions if q)
        )
    elif status == "working" and not cancelled:
        lines.append(f"Check again in {view.get('pollIntervalMs', 1000) / 1000:g} s.")
    described = _text(" ".join(lines), {**view, "next": _next_steps(task_id)})
    described["content"] += content
    return described
