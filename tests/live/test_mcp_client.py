"""The official ``mcp`` 2.3 client over HTTP with a bearer token, against a real server.

The client gets the ``task`` result type from a small extension (tests/live/mcp_tasks_extension.py).
This module's server runs in strict Mcp-Name mode: the official client sends ``Mcp-Name`` on
tasks/* (its requests declare ``name_param``), so nothing may be refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types
import pytest
from mcp.client import Client
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from audit.models import AuditEvent
from mcptasks.models import InputRequest, InputState, Task, TaskState
from tests.live.mcp_tasks_extension import (
    Ack,
    CreateTaskResult,
    TasksExtension,
    cancel_task,
    drive,
    get_task,
)

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

# Read by the mcp_server_process fixture: this module's server rejects a missing Mcp-Name on tasks/*.
SERVER_ENV = {"MCPTASKS_STRICT_MCP_NAME": "true"}


def run[T](scenario: Callable[[], Awaitable[T]], timeout_s: float = 90.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(scenario(), timeout_s)

    return asyncio.run(bounded())


class Session:
    """One connected official client: its extension and the questions it was asked."""

    def __init__(self, client: Client, extension: TasksExtension, asked: list[str]) -> None:
        self.client, self.extension, self.asked = client, extension, asked


def connect[T](
    url: str, token: str, answers: dict[str, dict[str, Any]] | None = None
) -> Callable[[Callable[[Session], Awaitable[T]]], Awaitable[T]]:
    """``await connect(url, token)(body)``: run ``body`` with a connected client."""
    answers = answers or {}

    async def elicit(
        context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        asked.append(params.message)
        return mcp_types.ElicitResult(action="accept", content=answers[params.message])

    asked: list[str] = []

    async def with_client(body: Callable[[Session], Awaitable[T]]) -> T:
        extension = TasksExtension()
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
            transport = streamable_http_client(url, http_client=http)
            async with Client(
                transport,
                elicitation_callback=elicit,
                extensions=[extension],
                read_timeout_seconds=60,
            ) as client:
                return await body(Session(client, extension, asked))

    return with_client


def test_sync_call(server, alice_token):
    async def body(session: Session) -> mcp_types.CallToolResult:
        assert session.client.protocol_version == "2026-07-28"
        assert server_caps(session.client)["io.modelcontextprotocol/tasks"] == {}
        return await session.client.call_tool("live_add", {"a": 2, "b": 3})

    result = run(lambda: connect(server.mcp_url, alice_token)(body))
    assert result.is_error in (None, False)
    assert result.structured_content == {"sum": 5}
    assert Task.objects.count() == 0


def leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


def server_caps(client: Client) -> dict[str, Any]:
    extensions = client.server_capabilities.extensions or {}
    return dict(extensions)


def test_a_task_polled_to_completion(server, alice_token, users):
    def check(session: Session) -> Awaitable[mcp_types.CallToolResult]:
        return session.client.call_tool("live_sleep", {"seconds": 0.6, "label": "official"})

    seen: dict[str, Any] = {}

    async def body(session: Session) -> mcp_types.CallToolResult:
        result = await check(session)
        seen["created"] = session.extension.created
        seen["polls"] = [poll.status for poll in session.extension.polls]
        return result

    result = run(lambda: connect(server.mcp_url, alice_token)(body))
    assert result.structured_content == {"slept": 0.6, "label": "official"}
    [created] = seen["created"]
    assert created.status == "working" and created.ttl_ms == 600_000
    assert created.poll_interval_ms == 200
    assert seen["polls"][0] == "working" and seen["polls"][-1] == "completed"
    task = Task.objects.get(pk=created.task_id)
    assert task.state == TaskState.COMPLETED and task.principal == users["alice"]
    assert AuditEvent.objects.get(task_id=task.pk, action="task.created").actor_kind == "principal"


def test_an_elicitation_answered_through_tasks_update(server, alice_token, users):
    answers = {"Delete a.txt?": {"confirm": True}}

    async def body(session: Session) -> tuple[mcp_types.CallToolResult, list[str]]:
        result = await session.client.call_tool("live_confirm", {"filename": "a.txt"})
        return result, session.asked

    result, asked = run(lambda: connect(server.mcp_url, alice_token, answers)(body))
    assert result.content[0].text == "deleted 'a.txt'"
    assert asked == ["Delete a.txt?"]
    request = InputRequest.objects.get(key="confirm")
    assert request.state == InputState.ANSWERED and request.answered_via == "mcp"
    assert request.answered_by == users["alice"]
    assert request.response == {"action": "accept", "content": {"confirm": True}}


def test_two_simultaneous_elicitations(server, alice_token):
    answers = {"What is your name?": {"name": "Ada"}, "Favourite colour?": {"color": "teal"}}

    async def body(session: Session) -> tuple[mcp_types.CallToolResult, list[Any]]:
        result = await session.client.call_tool("live_two_questions")
        return result, session.extension.polls

    result, polls = run(lambda: connect(server.mcp_url, alice_token, answers)(body))
    assert result.content[0].text == "Ada likes teal"
    waiting = [poll for poll in polls if poll.status == "input_required"]
    assert set(waiting[0].input_requests or {}) == {"name", "color"}  # outstanding together
    # One tasks/update per key (partial answers): two requests, each audited once.
    task_id = polls[0].task_id
    events = AuditEvent.objects.filter(task_id=task_id, action="task.input_answered")
    assert sorted(event.data["key"] for event in events) == ["color", "name"]
    assert len({event.request_id for event in events}) == 2


def test_cancel(server, alice_token, users):
    async def body(session: Session) -> tuple[Ack, Any]:
        created = await session.client.session.call_tool(
            "live_sleep", {"seconds": 60, "label": "long"}, allow_claimed=True
        )
        assert isinstance(created, CreateTaskResult)
        assert (await get_task(session.client.session, created.task_id)).status == "working"
        ack = await cancel_task(session.client.session, created.task_id)
        final = await drive(session.client.session, created.task_id, timeout_s=20)
        again = await cancel_task(session.client.session, created.task_id)  # idempotent
        assert again.result_type == "complete"
        return ack, final

    ack, final = run(lambda: connect(server.mcp_url, alice_token)(body))
    assert ack.result_type == "complete"
    assert final.status == "cancelled"
    assert final.result is None and final.error is None
    task = Task.objects.get(pk=final.task_id)
    assert task.state == TaskState.CANCELLED and task.cancel_requested_by == users["alice"]
    assert AuditEvent.objects.filter(task_id=task.pk, action="task.cancel_requested").count() == 1


def test_a_tool_error(server, alice_token):
    async def body(session: Session) -> mcp_types.CallToolResult:
        return await session.client.call_tool("live_tool_error")

    result = run(lambda: connect(server.mcp_url, alice_token)(body))
    assert result.is_error is True
    assert result.content[0].text == "the backend refused the job"
    assert Task.objects.get().state == TaskState.COMPLETED


def test_a_crash_raises_the_tasks_sanitized_error(server, alice_token):
    async def body(session: Session) -> None:
        await session.client.call_tool("crash_task")

    with pytest.raises(BaseException) as raised:
        run(lambda: connect(server.mcp_url, alice_token)(body))
    [error] = leaves(raised.value)  # the client's task groups wrap what the resolver raised
    assert isinstance(error, MCPError)
    assert error.code == -32603
    assert error.message == "Tool 'crash_task' failed with an internal error"
    assert Task.objects.get().state == TaskState.FAILED
