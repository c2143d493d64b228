"""Bounded waits and cancels that reach a hung step (issue 20, point 4): ``wait_until``'s
``timeout_s`` is honoured, and a step that ignores cancellation is stopped by the worker at the
tool's maximum run time, its open effect sent to reconciliation. Tools in tests/toolpack.py."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.utils import timezone

from audit.models import AuditEvent
from audit.record import Actor
from mcptasks import lifecycle, runner
from mcptasks.models import Effect, EffectState, Task, TaskState

pytestmark = pytest.mark.django_db(transaction=True)

S = TaskState


def _run_in_thread(task_id: str) -> tuple[threading.Thread, list[str | None]]:
    outcome: list[str | None] = []
    thread = threading.Thread(target=lambda: outcome.append(runner.run_task(task_id)))
    thread.start()
    return thread, outcome


def _wait_running(task_id: str) -> None:
    deadline = time.monotonic() + 10
    while Task.objects.get(pk=task_id).state != S.RUNNING:
        assert time.monotonic() < deadline, "the task never started"
        time.sleep(0.02)


def test_a_step_that_ignores_a_cancel_is_stopped_at_max_run_s_and_the_task_cancelled(
    make_task: Any, users: dict[str, Any]
) -> None:
    task = make_task(tool_name="ignores_cancel")
    thread, outcome = _run_in_thread(task.pk)
    _wait_running(task.pk)
    lifecycle.task_request_cancel(
        task_id=task.pk, actor=Actor.for_user(users["alice"], kind="principal"), reason="stop"
    )
    started = time.monotonic()

    thread.join(timeout=10)  # max_run_s is 1 s

    assert not thread.is_alive(), "the hung step was never stopped"
    assert time.monotonic() - started < 5
    assert outcome == [S.CANCELLED]
    row = Task.objects.get(pk=task.pk)
    assert (row.state, row.lease_owner) == (S.CANCELLED, "")
    cancelled = AuditEvent.objects.get(task_id=task.pk, action="task.cancelled")
    assert cancelled.actor_display == "watchdog"


def test_an_effect_still_running_at_max_run_s_fails_the_task_and_becomes_unknown(
    make_task: Any, users: dict[str, Any], settings: Any
) -> None:
    settings.MCPTASKS_RECONCILE_MARGIN_S = 60
    task = make_task(tool_name="ignores_cancel", arguments={"in_effect": True})
    thread, outcome = _run_in_thread(task.pk)

    thread.join(timeout=10)

    assert not thread.is_alive(), "the hung effect was never stopped"
    assert outcome == [S.FAILED]
    row = Task.objects.get(pk=task.pk)
    assert "maximum run time of 1 s" in row.error["message"]
    assert "max_run_s" in row.error["message"]
    effect = Effect.objects.get(task_id=task.pk, step="spin")
    assert effect.state == EffectState.UNKNOWN
    unknown = AuditEvent.objects.get(task_id=task.pk, action="effect.unknown")
    assert (unknown.data["step"], unknown.data["cause"]) == ("spin", "failed")
    # The stopped step was inside the downstream call: "not applied" waits out its lease.
    assert effect.not_applied_refused
    with pytest.raises(lifecycle.AttemptMayBeAlive):
        lifecycle.task_reconcile_effect(
            effect_id=effect.pk,
            actor=Actor.for_user(users["olga"], kind="operator"),
            decision="not_applied",
            note="nothing downstream",
        )


def test_the_tool_limit_is_enforced_whatever_the_setting_says(settings: Any) -> None:
    from mcptasks.tools.registry import registry

    settings.MCPTASKS_MAX_RUN_S = 0
    tool_def = registry.get("ignores_cancel")
    assert tool_def is not None and runner.max_run_s(tool_def) == 1.0
    echo = registry.get("echo_task")
    assert echo is not None and runner.max_run_s(echo) is None
    settings.MCPTASKS_MAX_RUN_S = 30
    assert runner.max_run_s(echo) == 30


def _resume(task_id: str) -> str | None:
    lifecycle.task_wake(task_id=task_id)
    return runner.run_task(task_id)


@pytest.mark.parametrize("catch", [False, True])
def test_wait_until_gives_up_at_its_timeout(make_task: Any, catch: bool) -> None:
    origin = timezone.now()
    with time_machine.travel(origin, tick=False) as clock:
        task = make_task(tool_name="waits_with_timeout", arguments={"timeout_s": 5, "catch": catch})
        assert runner.run_task(task.pk) == S.SLEEPING
        clock.shift(timedelta(seconds=2))
        assert _resume(task.pk) == S.SLEEPING  # checked again, still within the timeout
        wake_at = Task.objects.get(pk=task.pk).wake_at
        assert wake_at is not None and wake_at <= origin + timedelta(seconds=5)
        clock.shift(timedelta(seconds=4))
        assert _resume(task.pk) == S.COMPLETED

    result = Task.objects.get(pk=task.pk).result
    text = result["content"][0]["text"]
    assert "Gave up waiting for 'never' after 5 s" in text
    assert result.get("isError", False) is (not catch)
    assert text.startswith("handled: ") is catch


# ---------------------------------------------------------------- nothing of a task in the request
def test_a_task_tool_runs_nothing_in_the_web_request(mcp_for: Any) -> None:
    """ignores_cancel spins for ever on its first line: in the request it would never answer."""
    started = time.monotonic()
    reply = mcp_for("alice").tool("ignores_cancel", {})
    assert reply.status == 200, reply.body
    assert reply.result["resultType"] == "task"
    assert time.monotonic() - started < 5
    assert Task.objects.get(pk=reply.result["taskId"]).state == S.QUEUED


def test_code_before_the_questions_of_a_task_runs_in_the_request_with_a_time_limit(
    mcp_for: Any, settings: Any
) -> None:
    settings.MCPTASKS_PRE_TASK_LIMIT_S = 0.5
    started = time.monotonic()
    reply = mcp_for("alice").tool("slow_before_task", {})
    assert time.monotonic() - started < 5
    assert reply.error["code"] == -32603
    assert "MCPTASKS_PRE_TASK_LIMIT_S" in reply.error["message"]
    assert not Task.objects.filter(tool_name="slow_before_task").exists()
