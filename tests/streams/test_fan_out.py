"""The hub's fan-out: one read and one rendered frame per change and viewer, never shared
between viewers whose tasks/get would differ (DESIGN §6)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import httpx
import pytest

from audit.record import Actor
from mcptasks import lifecycle, runner
from mcptasks.mcp import hub as hub_module
from tests.protocol.conftest import TASK_CAPS, VERSION, McpClient
from tests.streams.test_listen import SUB, listen_body

pytestmark = pytest.mark.django_db(transaction=True)
# The tasks extension without elicitation: this request cannot take the task's questions.
NO_ELICITATION = {"extensions": TASK_CAPS["extensions"]}


async def collect(
    url: str, token: str, body: dict, notes: list[dict], until: int, max_seconds: float = 20
) -> None:
    """Append each ``notifications/tasks`` of one stream to ``notes`` until it holds ``until``."""
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
        asyncio.timeout(max_seconds),
    ):
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                message = json.loads(line[6:])
                if message.get("method") == "notifications/tasks":
                    notes.append(message)
                    if len(notes) >= until:
                        return


def without_meta(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if k not in ("_meta", "resultType")}


def test_streams_with_other_capabilities_get_their_own_frame(server_url, cast, make_task):
    task = make_task(tool_name="ask_twice")
    runner.run_task(task.pk)  # → input_required, questions "name" and "confirm"
    token = cast["alice"]["token"]
    asking = [[] for _ in range(3)]
    plain: list[dict] = []

    def answer_once_all_opened() -> None:
        deadline = time.monotonic() + 10
        while not all([*asking, plain]) and time.monotonic() < deadline:
            time.sleep(0.02)
        lifecycle.task_answer_input(
            task_id=task.pk,
            key="name",
            response={"action": "accept", "content": {"name": "Al"}},
            actor=Actor.for_user(cast["alice"]["user"], kind="principal"),
            via="mcp",
        )

    async def go() -> None:
        await asyncio.gather(
            *(
                collect(server_url, token, listen_body(10 + n, [task.pk], TASK_CAPS), notes, 2)
                for n, notes in enumerate(asking)
            ),
            collect(server_url, token, listen_body(20, [task.pk], NO_ELICITATION), plain, 2),
        )

    changer = threading.Thread(target=answer_once_all_opened)
    changer.start()
    asyncio.run(go())
    changer.join()

    for n, notes in enumerate(asking):
        assert [note["params"]["_meta"][SUB] for note in notes] == [10 + n, 10 + n]
        assert list(notes[-1]["params"]["inputRequests"]) == ["confirm"]
    assert "inputRequests" not in plain[-1]["params"]
    assert plain[-1]["params"]["status"] == "working"  # nothing this request can answer
    assert plain[-1]["params"]["_meta"][SUB] == 20
    # Each equals the tasks/get of a request with the same capabilities.
    for caps, note in ((TASK_CAPS, asking[0][-1]), (NO_ELICITATION, plain[-1])):
        got = McpClient(token).call("tasks/get", {"taskId": task.pk}, capabilities=caps).result
        assert without_meta(note["params"]) == without_meta(got)


def test_one_change_is_read_once_for_all_streams_of_a_process(
    server_url, cast, make_task, monkeypatch
):
    task = make_task(tool_name="ask_twice")
    runner.run_task(task.pk)
    token = cast["alice"]["token"]
    reads: list[tuple[list[str], int]] = []
    real_read = hub_module.read_frames

    def counting_read(task_ids: list[str], viewers: dict) -> Any:
        reads.append((list(task_ids), len(viewers)))
        return real_read(task_ids, viewers)

    monkeypatch.setattr(hub_module, "read_frames", counting_read)
    streams: list[list[dict]] = [[] for _ in range(5)]

    def answer_once_all_opened() -> None:
        deadline = time.monotonic() + 10
        while not all(streams) and time.monotonic() < deadline:
            time.sleep(0.02)
        reads.clear()  # only the change's reads from here on
        lifecycle.task_answer_input(
            task_id=task.pk,
            key="name",
            response={"action": "accept", "content": {"name": "Al"}},
            actor=Actor.for_user(cast["alice"]["user"], kind="principal"),
            via="mcp",
        )

    async def go() -> None:
        bodies = [listen_body(n, [task.pk], TASK_CAPS) for n in range(4)]
        bodies.append(listen_body(4, [task.pk], NO_ELICITATION))
        await asyncio.gather(
            *(
                collect(server_url, token, body, notes, 2)
                for body, notes in zip(bodies, streams, strict=True)
            )
        )

    changer = threading.Thread(target=answer_once_all_opened)
    changer.start()
    asyncio.run(go())
    changer.join()

    assert all(len(notes) == 2 for notes in streams)
    # One read of the task for the change, covering both viewers (two capability sets).
    assert reads == [([task.pk], 2)]
