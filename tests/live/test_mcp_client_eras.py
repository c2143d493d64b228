"""The official ``mcp`` 2.3 client against a real server: a 2025-era client (``mode="legacy"``,
the initialize handshake) is told which version the server speaks, and a 2026-07-28 client's
``progress_callback`` receives the progress of an inline call (issue 25)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from mcptasks.models import Task

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


def test_a_2025_era_client_is_told_the_server_speaks_2026_07_28(server, alice_token):
    async def connect() -> None:
        async with create_mcp_http_client(
            headers={"Authorization": f"Bearer {alice_token}"}
        ) as http:
            transport = streamable_http_client(server.mcp_url, http_client=http)
            async with Client(transport, mode="legacy", read_timeout_seconds=20):
                pass

    with pytest.raises(BaseException) as raised:
        asyncio.run(asyncio.wait_for(connect(), 30))
    [error] = [e for e in leaves(raised.value) if isinstance(e, MCPError)]
    assert error.error.code == -32602
    assert error.error.message.startswith("Unsupported protocol version 2025-11-25")
    assert "2026-07-28" in error.error.message
    assert error.error.data == {"supported": ["2026-07-28"], "requested": "2025-11-25"}


def test_progress_callback_of_the_official_client_gets_each_report(server, alice_token):
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async def call() -> Any:
        async with create_mcp_http_client(
            headers={"Authorization": f"Bearer {alice_token}"}
        ) as http:
            transport = streamable_http_client(server.mcp_url, http_client=http)
            async with Client(transport, read_timeout_seconds=20) as client:
                return await client.call_tool(
                    "counts_with_progress", {"steps": 3}, progress_callback=on_progress
                )

    result = asyncio.run(asyncio.wait_for(call(), 30))
    assert result.content[0].text == "counted 3"
    assert seen == [(n, 3, f"step {n} of 3") for n in (1, 2, 3)]
    assert Task.objects.count() == 0  # inline: no task


def test_a_client_without_the_extension_follows_the_fallback_to_the_result(server, alice_token):
    async def call() -> tuple[Any, list[Any]]:
        async with create_mcp_http_client(
            headers={"Authorization": f"Bearer {alice_token}"}
        ) as http:
            transport = streamable_http_client(server.mcp_url, http_client=http)
            async with Client(transport, read_timeout_seconds=20) as client:  # no extensions
                started = await client.call_tool("nap_with_fallback", {"seconds": 0.2})
                task_id = started.structured_content["taskId"]
                statuses = []
                for _ in range(100):
                    status = await client.call_tool("task_status", {"taskId": task_id})
                    statuses.append(status)
                    if status.structured_content["status"] == "completed":
                        break
                    await asyncio.sleep(0.25)
                return started, statuses

    started, statuses = asyncio.run(asyncio.wait_for(call(), 60))
    assert started.is_error in (None, False)
    task_id = started.structured_content["taskId"]
    assert "task_status" in started.content[0].text
    assert statuses[-1].structured_content["status"] == "completed"
    assert statuses[-1].content[-1].text == "napped 0.2s"
    assert Task.objects.get(pk=task_id).tool_name == "nap_with_fallback"
