"""The FastMCP 4.1.4 client (with fastmcp-tasks) over HTTP with a bearer token, against a real
server. FastMCP omits ``Mcp-Name`` on tasks/* (PROTOCOL §9), which this server tolerates outside
strict mode; it validates completed results against the tool's outputSchema."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from fastmcp import Client
from fastmcp.exceptions import ToolError
from fastmcp_tasks import call_tool_task

from audit.models import AuditEvent
from mcptasks.models import InputRequest, InputState, Task, TaskState

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def run[T](scenario: Callable[[], Awaitable[T]], timeout_s: float = 90.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(scenario(), timeout_s)

    return asyncio.run(bounded())


def client_for(
    url: str,
    token: str,
    answers: dict[str, dict[str, Any]] | None = None,
    asked: list[str] | None = None,
) -> Client[Any]:
    async def elicit(message: str, response_type: Any, params: Any, context: Any) -> dict[str, Any]:
        if asked is not None:
            asked.append(message)
        return (answers or {})[message]

    return Client(url, auth=token, elicitation_handler=elicit, timeout=60)


def test_sync_call(server, alice_token):
    async def scenario() -> Any:
        async with client_for(server.mcp_url, alice_token) as client:
            return await client.call_tool("live_add", {"a": 2, "b": 3})

    result = run(scenario)
    assert result.is_error is False
    assert result.structured_content == {"sum": 5}
    assert Task.objects.count() == 0


def test_a_task_polled_to_completion(server, alice_token):
    async def scenario() -> tuple[Any, Any, Any]:
        async with client_for(server.mcp_url, alice_token) as client:
            transparent = await client.call_tool(
                "live_sleep", {"seconds": 0.5, "label": "transparent"}
            )
            handle = await call_tool_task(client, "live_sleep", {"seconds": 0.5, "label": "handle"})
            first = await handle.status()
            return transparent, first, await handle.result()

    transparent, first, handled = run(scenario)
    # Completed results carry structuredContent that FastMCP checks against the outputSchema.
    assert transparent.structured_content == {"slept": 0.5, "label": "transparent"}
    assert first.status == "working" and first.poll_interval_ms == 200
    assert handled.structured_content == {"slept": 0.5, "label": "handle"}
    assert Task.objects.filter(state=TaskState.COMPLETED).count() == 2


def test_an_elicitation_answered_through_tasks_update(server, alice_token, users):
    asked: list[str] = []

    async def scenario() -> Any:
        async with client_for(
            server.mcp_url, alice_token, {"Delete b.txt?": {"confirm": True}}, asked
        ) as client:
            return await client.call_tool("live_confirm", {"filename": "b.txt"})

    result = run(scenario)
    assert result.content[0].text == "deleted 'b.txt'"
    assert asked == ["Delete b.txt?"]
    request = InputRequest.objects.get(key="confirm")
    assert (request.state, request.answered_via) == (InputState.ANSWERED, "mcp")
    assert request.answered_by == users["alice"]


def test_two_simultaneous_elicitations(server, alice_token):
    answers = {"What is your name?": {"name": "Ada"}, "Favourite colour?": {"color": "teal"}}
    asked: list[str] = []

    async def scenario() -> Any:
        async with client_for(server.mcp_url, alice_token, answers, asked) as client:
            return await client.call_tool("live_two_questions")

    result = run(scenario)
    assert result.content[0].text == "Ada likes teal"
    assert sorted(asked) == sorted(answers)
    task = Task.objects.get()
    events = AuditEvent.objects.filter(task_id=task.pk, action="task.input_answered")
    assert sorted(event.data["key"] for event in events) == ["color", "name"]
    # FastMCP answers every outstanding key in one tasks/update.
    assert len({event.request_id for event in events}) == 1


def test_cancel(server, alice_token, users):
    async def scenario() -> tuple[Any, Any]:
        async with client_for(server.mcp_url, alice_token) as client:
            handle = await call_tool_task(client, "live_sleep", {"seconds": 60, "label": "x"})
            await handle.cancel()
            final = await handle.wait(timeout=20)
            await handle.cancel()  # cancelling a terminal task: the idempotent ack
            try:
                await handle.result()
            except ToolError as exc:
                return final, exc
            return final, None

    final, error = run(scenario)
    assert final.status == "cancelled"
    assert error is not None and "cancelled" in str(error)
    task = Task.objects.get()
    assert task.state == TaskState.CANCELLED and task.cancel_requested_by == users["alice"]


def test_a_tool_error(server, alice_token):
    async def scenario() -> tuple[Any, Any]:
        async with client_for(server.mcp_url, alice_token) as client:
            try:
                await client.call_tool("live_tool_error")
            except ToolError as exc:
                raised = exc
            else:
                raised = None
            quiet = await client.call_tool("live_tool_error", raise_on_error=False)
            return raised, quiet

    raised, quiet = run(scenario)
    assert raised is not None and "the backend refused the job" in str(raised)
    assert quiet.is_error is True
    assert quiet.content[0].text == "the backend refused the job"
    assert set(Task.objects.values_list("state", flat=True)) == {TaskState.COMPLETED}


def missing_mcp_name_count(url: str) -> float:
    """The server's count of tasks/* requests that came without Mcp-Name (PROTOCOL §9)."""
    import httpx

    for line in httpx.get(f"{url}/metrics", timeout=5).text.splitlines():
        if line.startswith("mcptasks_missing_mcp_name_total "):
            return float(line.split()[1])
    return 0.0


def test_fastmcp_omits_mcp_name_on_tasks_methods_and_the_server_tolerates_it(server, alice_token):
    before = missing_mcp_name_count(server.url)

    async def scenario() -> Any:
        async with client_for(server.mcp_url, alice_token) as client:
            handle = await call_tool_task(client, "live_sleep", {"seconds": 0.2, "label": "m"})
            await handle.cancel()
            return await handle.wait(timeout=20)

    final = run(scenario)
    assert final.status in ("cancelled", "completed")
    # At least one tasks/get and the tasks/cancel went without the header, and were served.
    assert missing_mcp_name_count(server.url) >= before + 2
