"""A losing tasks/update answer is told it was not the one taken (issue 20, point 6): the
result ``_meta["dev.mcptasks/inputResponses"]`` names, per key, "taken" or "not_taken"."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from mcptasks.models import InputRequest
from tests.protocol.conftest import McpClient
from tests.tasks.conftest import get_task

pytestmark = pytest.mark.django_db(transaction=True)

META = "dev.mcptasks/inputResponses"
YES = {"action": "accept", "content": {"ok": True}}
NO = {"action": "accept", "content": {"ok": False}}


def _update(client: McpClient, task_id: str, **responses: Any) -> dict[str, Any]:
    reply = client.call("tasks/update", {"taskId": task_id, "inputResponses": responses})
    assert reply.status == 200, reply.body
    assert reply.result["resultType"] == "complete"
    return reply.result["_meta"][META]  # type: ignore[no-any-return]


def test_the_second_answer_to_a_question_is_not_taken_and_says_so(
    mcp: McpClient, start_task: Callable[..., str], run_jobs: Callable[[], int]
) -> None:
    task_id = start_task("resume_across_builds")
    run_jobs()
    key = next(iter(get_task(mcp, task_id)["inputRequests"]))

    assert _update(mcp, task_id, **{key: YES}) == {key: "taken"}
    assert _update(mcp, task_id, **{key: NO}) == {key: "not_taken"}
    assert _update(mcp, task_id, nonsense=YES) == {"nonsense": "not_taken"}
    request = InputRequest.objects.get(task_id=task_id, key=key)
    assert request.response == YES


@pytest.mark.pg
def test_of_parallel_answers_exactly_one_is_taken(
    mcp_for: Callable[[str], McpClient],
    start_task: Callable[..., str],
    run_jobs: Callable[[], int],
) -> None:
    task_id = start_task("resume_across_builds")
    run_jobs()
    client = mcp_for("alice")
    key = next(iter(get_task(client, task_id)["inputRequests"]))
    statuses: list[str] = []
    barrier = threading.Barrier(8)

    def answer(number: int) -> None:
        barrier.wait()
        result = _update(mcp_for("alice"), task_id, **{key: YES if number % 2 else NO})
        statuses.append(result[key])

    threads = [threading.Thread(target=answer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(statuses) == ["not_taken"] * 7 + ["taken"]
    assert InputRequest.objects.get(task_id=task_id, key=key).state == "answered"
    assert get_task(client, task_id)["status"] != "input_required"
