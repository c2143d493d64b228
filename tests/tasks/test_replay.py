"""The replay runner (DESIGN §4): exactly-once effects, determinism, safe points, outcomes, and
questions asked before a task exists. Tools live in tests/toolpack.py."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.utils import timezone

from audit.models import AuditEvent
from mcptasks.models import Audience, InputRequest, InputState, Task, TaskState, TaskStep
from tests.protocol.conftest import McpClient, validate, validate_tools_call_result
from tests.tasks.conftest import get_task

pytestmark = pytest.mark.django_db(transaction=True)

YES = {"action": "accept", "content": {"ok": True}}


def answer(client: McpClient, task_id: str, **responses: dict[str, Any]) -> None:
    reply = client.call("tasks/update", {"taskId": task_id, "inputResponses": responses})
    assert reply.status == 200 and reply.result["resultType"] == "complete", reply.body


def actions(task_id: str) -> list[str]:
    return list(
        AuditEvent.objects.filter(task_id=task_id).order_by("id").values_list("action", flat=True)
    )


def state_of(task_id: str) -> str:
    return Task.objects.get(pk=task_id).state


# ---------------------------------------------------------------- exactly-once effects
def test_three_asks_two_effects_resumed_five_times_run_each_effect_once(
    mcp, start_task, run_jobs, probes
):
    origin = timezone.now()
    with time_machine.travel(origin, tick=False) as clock:
        task_id = start_task("three_asks_two_effects")
        run_jobs()
        assert state_of(task_id) == TaskState.AWAITING_INPUT
        for key in ("a", "b", "c"):
            assert list(get_task(mcp, task_id)["inputRequests"]) == [key]
            answer(mcp, task_id, **{key: YES})
            run_jobs()
        assert state_of(task_id) == TaskState.SLEEPING  # "settle"
        clock.shift(timedelta(seconds=61))
        run_jobs()  # the timer's wake job is due: resume, publish, sleep again
        assert state_of(task_id) == TaskState.SLEEPING  # "cool-down"
        clock.shift(timedelta(seconds=61))
        run_jobs()

    got = get_task(mcp, task_id)
    assert got["status"] == "completed", got
    assert actions(task_id).count("task.started") == 6  # the first run and five resumes
    assert probes.EFFECT_CALLS == {"create": 1, "publish": 1}
    keys = {"create": [f"{task_id}:create"], "publish": [f"{task_id}:publish"]}
    assert keys == probes.EFFECT_KEYS  # the downstream got the derived idempotency keys
    assert got["result"]["structuredContent"] == {
        "answers": [True, True, True],
        "created": {"step": "create", "call": 1},
        "published": {"step": "publish", "call": 1},
    }
    # Each question was recorded once, whatever the number of replays.
    assert sorted(InputRequest.objects.filter(task_id=task_id).values_list("key", flat=True)) == [
        "a",
        "b",
        "c",
    ]
    assert Task.objects.get(pk=task_id).step_log == [
        "ask:a",
        "effect:create",
        "ask:b",
        "ask:c",
        "sleep:settle",
        "effect:publish",
        "sleep:cool-down",
    ]


# ---------------------------------------------------------------- determinism
def test_a_divergent_tool_fails_with_the_non_deterministic_tool_error(
    mcp, start_task, run_jobs, probes
):
    task_id = start_task("divergent")
    run_jobs()
    assert get_task(mcp, task_id)["status"] == "input_required"
    probes.FLAGS["diverge"] = True
    answer(mcp, task_id, a=YES)
    run_jobs()
    got = get_task(mcp, task_id)
    assert got["status"] == "failed", got
    validate("FailedTask", got, ext=True)
    assert got["error"]["code"] == -32603
    assert got["error"]["message"].startswith("Non-deterministic tool:")
    assert "'ask:a'" in got["error"]["message"] and "'now:now#1'" in got["error"]["message"]


def test_a_divergence_the_tool_swallows_still_fails_the_task(mcp, start_task, run_jobs, probes):
    task_id = start_task("divergent_swallowing")
    run_jobs()
    assert get_task(mcp, task_id)["status"] == "input_required"
    probes.FLAGS["diverge"] = True
    answer(mcp, task_id, a=YES)
    run_jobs()
    got = get_task(mcp, task_id)
    assert probes.REACHED == ["swallowed"]  # the tool did catch it…
    assert got["status"] == "failed", got  # …but a diverged replay never completes
    assert got["error"]["message"].startswith("Non-deterministic tool:")


def test_ctx_now_and_uuid_are_stable_across_replays(mcp, start_task, run_jobs, probes):
    first = timezone.now().replace(microsecond=123000)
    with time_machine.travel(first, tick=False) as clock:
        task_id = start_task("stable_now")
        run_jobs()
        clock.shift(timedelta(hours=2))
        answer(mcp, task_id, go=YES)
        run_jobs()
    result = get_task(mcp, task_id)["result"]["structuredContent"]
    assert len(probes.REACHED) == 2
    assert probes.REACHED[0] == probes.REACHED[1]  # the replay saw the recorded values
    assert probes.REACHED[0] == f"{result['started']}|{result['token']}"
    assert result["started"] == first.isoformat()
    assert result["finished"] == (first + timedelta(hours=2)).isoformat()
    assert TaskStep.objects.filter(task_id=task_id).count() == 3  # now#1, uuid#1, now#2


def test_a_tool_that_catches_exception_around_ask_still_suspends(mcp, start_task, run_jobs, probes):
    task_id = start_task("swallowing_ask")
    run_jobs()
    got = get_task(mcp, task_id)
    assert got["status"] == "input_required"
    assert list(got["inputRequests"]) == ["q"]
    assert probes.REACHED == []
    answer(mcp, task_id, q=YES)
    run_jobs()
    got = get_task(mcp, task_id)
    assert got["result"]["content"][0]["text"] == "answered accept"
    assert probes.REACHED == []


# ---------------------------------------------------------------- safe points
CTX_CALLS = [
    "report",
    "now",
    "uuid",
    "job",
    "ask",
    "effect",
    "sleep",
    "wait_until",
    "sample",
    "roots",
]


@pytest.mark.parametrize("call", CTX_CALLS)
def test_every_ctx_call_is_a_cancellation_safe_point(mcp, start_task, run_jobs, probes, call):
    task_id = start_task("cancel_probe", {"call": call})
    acks: list[dict[str, Any]] = []

    def cancel_while_running() -> None:
        assert state_of(task_id) == TaskState.RUNNING
        acks.append(McpClient(mcp.token).call("tasks/cancel", {"taskId": task_id}).result)
        assert state_of(task_id) == TaskState.RUNNING  # intent only: the tool is mid-step

    probes.HOOKS["between"] = cancel_while_running
    run_jobs()
    assert acks and acks[0]["resultType"] == "complete"
    got = get_task(mcp, task_id)
    assert got["status"] == "cancelled", got
    reached = [f"before {call}"]
    assert reached == probes.REACHED  # stopped at the safe point
    assert probes.EFFECT_CALLS["side"] == 0
    task = Task.objects.get(pk=task_id)
    assert task.backend_job_id == ""
    assert not InputRequest.objects.filter(task_id=task_id).exists()
    assert not TaskStep.objects.filter(task_id=task_id).exists()
    assert actions(task_id)[-2:] == ["task.cancel_requested", "task.cancelled"]
    assert run_jobs() == 0


# ---------------------------------------------------------------- outcomes
def test_returning_completes_the_task(mcp, start_task, run_jobs):
    task_id = start_task("echo_task", {"text": "back"})
    run_jobs()
    got = get_task(mcp, task_id)
    assert got["status"] == "completed"
    assert got["result"] == {
        "resultType": "complete",
        "content": [{"type": "text", "text": "back"}],
    }
    assert actions(task_id)[-1] == "task.completed"


def test_tool_error_completes_with_is_error(mcp, start_task, run_jobs):
    task_id = start_task("tool_error_task")
    run_jobs()
    got = get_task(mcp, task_id)
    assert got["status"] == "completed"
    assert got["result"]["isError"] is True
    assert got["statusMessage"] == "Completed with a tool error"


def test_other_exceptions_fail_with_a_sanitized_32603_and_are_logged(
    mcp, start_task, run_jobs, caplog
):
    task_id = start_task("crash_task")
    with caplog.at_level(logging.ERROR, logger="mcptasks.runner"):
        run_jobs()
    got = get_task(mcp, task_id)
    assert got["status"] == "failed"
    assert got["error"] == {
        "code": -32603,
        "message": "Tool 'crash_task' failed with an internal error",
    }
    wire = str(got)
    assert "widget cache" not in wire and "RuntimeError" not in wire
    assert "widget cache" not in str(
        list(AuditEvent.objects.filter(task_id=task_id).values_list("data", flat=True))
    )
    records = [
        r
        for r in caplog.records
        if r.name == "mcptasks.runner" and getattr(r, "task_id", None) == task_id
    ]
    assert records, caplog.text
    assert records[0].exc_info is not None
    assert "widget cache overflow at shard 7" in caplog.text and "Traceback" in caplog.text


# ---------------------------------------------------------------- questions before a task
def round_two(client: McpClient, first: dict[str, Any], name: str = "Alice") -> Any:
    return client.call(
        "tools/call",
        {
            "name": "greet_in_task",
            "arguments": {},
            "inputResponses": {"user_name": {"action": "accept", "content": {"name": name}}},
            "requestState": first["requestState"],
        },
    )


def test_questions_before_a_task_create_exactly_one_task_with_the_answer(mcp, users, run_jobs):
    first = mcp.tool("greet_in_task").result
    validate_tools_call_result(first)
    assert first["resultType"] == "input_required"
    assert list(first["inputRequests"]) == ["user_name"]
    assert "taskId" not in first and first["requestState"]
    assert Task.objects.count() == 0

    created = round_two(mcp, first).result
    validate_tools_call_result(created)
    assert created["resultType"] == "task"
    assert "requestState" not in created and "inputRequests" not in created
    task = Task.objects.get()
    assert created["taskId"] == task.pk
    request = InputRequest.objects.get(task=task)
    assert (request.key, request.state, request.audience) == (
        "user_name",
        InputState.ANSWERED,
        Audience.CLIENT,
    )
    assert request.response == {"action": "accept", "content": {"name": "Alice"}}
    assert request.answered_by_id == users["alice"].pk and request.answered_via == "mcp"

    # The same round-2 request again (a client retry): the same task, not a second one.
    assert round_two(mcp, first).result["taskId"] == task.pk
    assert Task.objects.count() == 1
    assert actions(task.pk).count("task.created") == 1
    created_event = AuditEvent.objects.get(task_id=task.pk, action="task.created")
    assert created_event.data["answered_before_creation"] == ["user_name"]

    run_jobs()
    got = get_task(mcp, task.pk)
    assert got["status"] == "completed", got
    assert "Alice" in got["result"]["content"][0]["text"]
    assert "inputRequests" not in got


def test_concurrent_replays_of_round_two_create_one_task(mcp):
    first = mcp.tool("greet_in_task").result
    barrier = threading.Barrier(6)
    task_ids: list[str] = []

    def replay() -> None:
        client = McpClient(mcp.token)
        barrier.wait()
        task_ids.append(round_two(client, first).result["taskId"])

    threads = [threading.Thread(target=replay) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(task_ids) == 6 and len(set(task_ids)) == 1
    assert Task.objects.count() == 1


def test_round_two_is_bound_to_its_principal_and_validated(mcp, mcp_for):
    first = mcp.tool("greet_in_task").result
    stolen = round_two(mcp_for("bob"), first)
    assert stolen.error["code"] == -32602
    bad = mcp.call(
        "tools/call",
        {
            "name": "greet_in_task",
            "arguments": {},
            "inputResponses": {"user_name": {"action": "accept", "content": {"name": 7}}},
            "requestState": first["requestState"],
        },
    )
    assert bad.error["code"] == -32602 and "'user_name'" in bad.error["message"]
    assert Task.objects.count() == 0


def test_an_intended_effect_is_found_even_without_a_step_log(make_task, probes):
    """The runner never re-runs a non-idempotent effect whose intent is recorded, whatever else
    was recorded before the crash (here: no step log at all)."""
    from mcptasks import lifecycle, runner

    task = make_task(tool_name="cancel_probe", arguments={"call": "effect"})
    claimed = lifecycle.task_claim(task_id=task.pk, worker="doomed-worker")
    lifecycle.task_effect_intended(
        task_id=task.pk,
        attempt=claimed.attempt,
        step="side",
        idempotency_key=f"{task.pk}:side",
        idempotent=False,
    )
    Task.objects.filter(pk=task.pk).update(lease_expires_at=timezone.now() - timedelta(minutes=1))
    lifecycle.task_requeue(task_id=task.pk)
    assert Task.objects.get(pk=task.pk).step_log == []
    assert runner.run_task(task.pk) == TaskState.NEEDS_RECONCILIATION
    assert probes.EFFECT_CALLS["side"] == 0
