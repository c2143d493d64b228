"""subscriptions/listen over the ASGI app: ack, current state, every change, closing result."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import httpx
import pytest

from mcptasks import runner
from mcptasks.models import Task
from tests.protocol.conftest import TASK_CAPS, VERSION, McpClient, validate

pytestmark = pytest.mark.django_db(transaction=True)
SUB = "io.modelcontextprotocol/subscriptionId"


def listen_body(request_id: int, task_ids: list[str] | None, caps: dict[str, Any]) -> dict:
    notifications: dict[str, Any] = {}
    if task_ids is not None:
        notifications["taskIds"] = task_ids
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "subscriptions/listen",
        "params": {
            "notifications": notifications,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": VERSION,
                "io.modelcontextprotocol/clientCapabilities": caps,
            },
        },
    }


async def read_stream(
    url: str, token: str, body: dict, on_open: Any = None, max_seconds: float = 20
) -> list[dict]:
    messages: list[dict] = []
    headers = {
        "content-type": "application/json",
        "accept": "text/event-stream",
        "mcp-protocol-version": VERSION,
        "mcp-method": "subscriptions/listen",
        "authorization": f"Bearer {token}",
    }
    async with (
        httpx.AsyncClient(base_url=url, timeout=max_seconds) as client,
        client.stream("POST", "/mcp", json=body, headers=headers) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-accel-buffering"] == "no"
        if on_open:
            on_open()
        async with asyncio.timeout(max_seconds):
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    messages.append(json.loads(line[6:]))
    return messages


def test_listen_streams_each_change_until_terminal(server_url, cast, make_task):
    task = make_task(tool_name="ask_twice")
    runner.run_task(task.pk)  # → input_required
    alice = cast["alice"]["token"]
    client = McpClient(alice)

    def answer_later() -> None:
        time.sleep(0.5)
        client.call(
            "tasks/update",
            {
                "taskId": task.pk,
                "inputResponses": {
                    "name": {"action": "accept", "content": {"name": "Al"}},
                    "confirm": {"action": "accept", "content": {"confirm": True}},
                },
            },
        )
        runner.run_task(task.pk)

    worker = threading.Thread(target=answer_later)
    messages = asyncio.run(
        read_stream(
            server_url, alice, listen_body(7, [task.pk, "nope"], TASK_CAPS), on_open=worker.start
        )
    )
    worker.join()
    ack = messages[0]
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["_meta"][SUB] == 7
    assert ack["params"]["notifications"] == {"taskIds": [task.pk]}
    notes = [m for m in messages[1:] if m.get("method") == "notifications/tasks"]
    statuses = [n["params"]["status"] for n in notes]
    assert statuses[0] == "input_required"
    assert statuses[-1] == "completed"
    for note in notes:
        assert note["params"]["_meta"][SUB] == 7
        validate("TaskStatusNotification", note, ext=True)
    closing = messages[-1]
    assert closing["id"] == 7 and closing["result"]["_meta"][SUB] == 7
    final = client.call("tasks/get", {"taskId": task.pk}).result
    last = dict(notes[-1]["params"])
    last.pop("_meta")
    final.pop("_meta")
    final.pop("resultType")
    assert last == final


def test_listen_hides_other_tenants_tasks(server_url, cast, make_task):
    foreign = make_task(owner="bob")
    mine = make_task(owner="alice")
    runner.run_task(mine.pk)
    messages = asyncio.run(
        read_stream(
            server_url, cast["alice"]["token"], listen_body(3, [foreign.pk, mine.pk], TASK_CAPS)
        )
    )
    assert messages[0]["params"]["notifications"]["taskIds"] == [mine.pk]
    ids = {m["params"]["taskId"] for m in messages if m.get("method") == "notifications/tasks"}
    assert ids == {mine.pk}
    assert Task.objects.filter(pk=foreign.pk).exists()


def test_listen_task_ids_without_extension_is_missing_capability(cast):
    client = McpClient(cast["alice"]["token"])
    reply = client.raw(
        json.dumps(listen_body(4, ["x"], {})), {**client.headers_for("subscriptions/listen", {})}
    )
    assert reply.status == 400
    assert reply.body["error"]["code"] == -32021
