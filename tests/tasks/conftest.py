"""Fixtures of the tasks tests: the protocol client, probes of tests/toolpack.py, task drivers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests import toolpack
from tests.protocol import conftest as protocol_fixtures
from tests.protocol.conftest import McpClient, validate

# The protocol tests' authenticated clients, shared with these tests.
mcp_for = protocol_fixtures.mcp_for
mcp = protocol_fixtures.mcp

TASKS = "io.modelcontextprotocol/tasks"


@pytest.fixture(autouse=True)
def probes() -> Iterator[Any]:
    """The module-level counters and switches of the test tools, reset around each test."""
    toolpack.reset_probes()
    yield toolpack
    toolpack.reset_probes()


def get_task(client: McpClient, task_id: str) -> dict[str, Any]:
    """``tasks/get`` that must succeed; the result is validated against GetTaskResult."""
    reply = client.call("tasks/get", {"taskId": task_id})
    assert reply.status == 200, reply.body
    validate("GetTaskResult", reply.result, ext=True)
    return reply.result


@pytest.fixture
def start_task(mcp_for: Callable[[str], McpClient]) -> Callable[..., str]:
    """``start_task(tool, arguments)`` → the taskId of a CreateTaskResult (validated); alice
    calls unless ``client`` is given."""

    def start(
        tool: str, arguments: dict[str, Any] | None = None, client: McpClient | None = None
    ) -> str:
        reply = (client or mcp_for("alice")).tool(tool, arguments or {})
        assert reply.status == 200, reply.body
        validate("CreateTaskResult", reply.result, ext=True)
        return reply.result["taskId"]  # type: ignore[no-any-return]

    return start
