"""A small client extension for the official ``mcp`` 2.3 client: the ``task`` result type of
``io.modelcontextprotocol/tasks`` (SEP-2663).

``mcp`` 2.3 knows only the legacy (2025-11-25) task types, but lets an extension claim a new
``resultType`` on ``tools/call`` (``ClientExtension`` + ``ResultClaim``). This one advertises the
extension, claims ``resultType: "task"``, and resolves a task by polling ``tasks/get`` at the
server's ``pollIntervalMs``; it answers ``inputRequests`` through the client's own callback table
(``ClientSession.dispatch_input_request``, the same path MRTR uses), one ``tasks/update`` per
key. Its requests declare ``name_param = "taskId"``, so the SDK sends ``Mcp-Name`` on tasks/*.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import anyio
import mcp_types
from mcp.client import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientRequestContext, ClientSession
from mcp.shared.exceptions import MCPError
from pydantic import ConfigDict, TypeAdapter

TASKS = "io.modelcontextprotocol/tasks"
TERMINAL = frozenset({"completed", "failed", "cancelled"})
Status = Literal["working", "input_required", "completed", "failed", "cancelled"]


class _TaskFields(mcp_types.Result):
    task_id: str
    status: Status
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None


class CreateTaskResult(_TaskFields):
    """The claimed ``tools/call`` result (flat, ``resultType: "task"``)."""

    result_type: Literal["task"]


class GetTaskResult(_TaskFields):
    """``tasks/get``: the DetailedTask, always ``resultType: "complete"``."""

    result_type: Literal["complete"]
    input_requests: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class Ack(mcp_types.Result):
    """The empty ack of tasks/update and tasks/cancel: nothing but resultType (and _meta)."""

    model_config = ConfigDict(extra="forbid")
    result_type: Literal["complete"]


class TaskParams(mcp_types.RequestParams):
    task_id: str


class UpdateTaskParams(TaskParams):
    input_responses: dict[str, Any]


class GetTaskRequest(mcp_types.Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams
    name_param = "taskId"


class UpdateTaskRequest(mcp_types.Request[UpdateTaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: UpdateTaskParams
    name_param = "taskId"


class CancelTaskRequest(mcp_types.Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskParams
    name_param = "taskId"


_INPUT_REQUEST: TypeAdapter[Any] = TypeAdapter(mcp_types.InputRequest)


async def get_task(session: ClientSession, task_id: str) -> GetTaskResult:
    return await session.send_request(
        GetTaskRequest(params=TaskParams(task_id=task_id)), GetTaskResult
    )


async def update_task(session: ClientSession, task_id: str, responses: dict[str, Any]) -> Ack:
    return await session.send_request(
        UpdateTaskRequest(params=UpdateTaskParams(task_id=task_id, input_responses=responses)), Ack
    )


async def cancel_task(session: ClientSession, task_id: str) -> Ack:
    return await session.send_request(CancelTaskRequest(params=TaskParams(task_id=task_id)), Ack)


async def answer_inputs(
    session: ClientSession, task_id: str, input_requests: dict[str, Any]
) -> list[str]:
    """Answer every outstanding request through the client's callbacks, one update per key."""
    answered = []
    for key, payload in input_requests.items():
        request = _INPUT_REQUEST.validate_python(payload, by_name=False)
        context = ClientRequestContext(session=session, request_id=f"{task_id}:{key}")
        response = await session.dispatch_input_request(context, request)
        if isinstance(response, mcp_types.ErrorData):
            raise MCPError.from_error_data(response)
        await update_task(
            session,
            task_id,
            {key: response.model_dump(by_alias=True, mode="json", exclude_none=True)},
        )
        answered.append(key)
    return answered


async def drive(
    session: ClientSession,
    task_id: str,
    *,
    timeout_s: float = 60.0,
    seen: list[GetTaskResult] | None = None,
) -> GetTaskResult:
    """Poll to a terminal status at ``pollIntervalMs``, answering input as it is asked."""
    with anyio.fail_after(timeout_s):
        while True:
            task = await get_task(session, task_id)
            if seen is not None:
                seen.append(task)
            if task.status in TERMINAL:
                return task
            if task.status == "input_required":
                await answer_inputs(session, task_id, task.input_requests or {})
                continue
            await anyio.sleep((task.poll_interval_ms or 1000) / 1000)


def outcome(task: GetTaskResult) -> mcp_types.CallToolResult:
    """What ``call_tool`` returns for a terminal task; a failed task raises its JSON-RPC error."""
    if task.status == "completed":
        return mcp_types.CallToolResult.model_validate(task.result or {}, by_name=False)
    if task.status == "failed":
        error = task.error or {}
        raise MCPError(
            code=int(error.get("code", -32603)),
            message=str(error.get("message", "task failed")),
            data=error.get("data"),
        )
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text=f"Task {task.task_id} was cancelled")],
        is_error=True,
    )


class TasksExtension(ClientExtension):
    """Advertise the tasks extension and resolve ``resultType: "task"`` transparently."""

    identifier = TASKS

    def __init__(self) -> None:
        self.created: list[CreateTaskResult] = []
        self.polls: list[GetTaskResult] = []

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (ResultClaim(result_type="task", model=CreateTaskResult, resolve=self._resolve),)

    async def _resolve(
        self, created: CreateTaskResult, ctx: ClaimContext
    ) -> mcp_types.CallToolResult:
        self.created.append(created)
        final = await drive(
            ctx.session, created.task_id, timeout_s=ctx.read_timeout_seconds or 60, seen=self.polls
        )
        return outcome(final)
