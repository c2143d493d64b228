"""TTL (DESIGN §3, PROTOCOL §4.10): readable for the whole ttlMs; a non-terminal task past it
is failed by ``sweeps.expire_tasks``; a terminal one is deleted by ``sweeps.purge_tasks`` after
the grace period; terminal states never change; two sweeps at once are harmless."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.utils import timezone

from audit.models import AuditEvent
from mcptasks import sweeps
from mcptasks.models import InputRequest, InputState, Task, TaskState, TaskStep
from tests.protocol.conftest import McpClient
from tests.tasks.conftest import get_task

pytestmark = pytest.mark.django_db(transaction=True)

EXPIRED = {"code": -32603, "message": "Task expired: it did not finish within its ttlMs"}
NOT_FOUND = {"code": -32602, "message": "Failed to retrieve task: Task not found"}
MS = timedelta(milliseconds=1)


@pytest.fixture
def clock() -> Iterator[Any]:
    """Frozen time that a test moves with ``clock.move_to(...)``; starts now."""
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        yield traveller


def created_at(task_id: str) -> datetime:
    return Task.objects.get(pk=task_id).created_at


def ttl_of(mcp: McpClient, task_id: str) -> timedelta:
    return timedelta(milliseconds=get_task(mcp, task_id)["ttlMs"])


def count(task_id: str, action: str) -> int:
    return AuditEvent.objects.filter(task_id=task_id, action=action).count()


@pytest.fixture
def waiting_task(mcp, start_task, run_jobs) -> Callable[[], str]:
    def make() -> str:
        task_id = start_task("ask_twice")
        run_jobs()
        assert get_task(mcp, task_id)["status"] == "input_required"
        return task_id

    return make


@pytest.fixture
def completed_task(mcp, start_task, run_jobs) -> Callable[[], str]:
    def make() -> str:
        task_id = start_task("echo_task", {"text": "kept"})
        run_jobs()
        assert get_task(mcp, task_id)["status"] == "completed"
        return task_id

    return make


def test_tasks_are_readable_and_unchanged_for_their_whole_ttl(
    mcp, clock, waiting_task, completed_task
):
    waiting, completed = waiting_task(), completed_task()
    before = {task_id: get_task(mcp, task_id) for task_id in (waiting, completed)}
    clock.move_to(created_at(waiting) + ttl_of(mcp, waiting) - MS)
    assert sweeps.expire_tasks() == 0
    assert sweeps.purge_tasks() == 0
    for task_id, snapshot in before.items():
        assert get_task(mcp, task_id) == snapshot


def test_a_non_terminal_task_past_its_ttl_is_failed_with_a_clear_error(
    mcp, clock, waiting_task, start_task
):
    waiting = waiting_task()
    queued = start_task("echo_task", {"text": "never ran"})  # no worker ran it
    clock.move_to(created_at(queued) + ttl_of(mcp, queued) + MS)
    assert sweeps.expire_tasks() == 2
    for task_id in (waiting, queued):
        got = get_task(mcp, task_id)
        assert got["status"] == "failed", got
        assert got["error"] == EXPIRED
        assert got["statusMessage"] == EXPIRED["message"]
        assert count(task_id, "task.expired") == 1
        event = AuditEvent.objects.get(task_id=task_id, action="task.expired")
        assert (event.actor_kind, event.actor_display) == ("system", "sweeper")
    # Its questions are withdrawn: a late answer is ignored and changes nothing.
    assert not InputRequest.objects.filter(task_id=waiting, state=InputState.PENDING).exists()
    mcp.call(
        "tasks/update",
        {
            "taskId": waiting,
            "inputResponses": {"name": {"action": "accept", "content": {"name": "late"}}},
        },
    )
    assert get_task(mcp, waiting)["error"] == EXPIRED
    assert sweeps.expire_tasks() == 0  # terminal now: never expired twice


def test_a_running_task_expired_mid_step_stays_failed(mcp, start_task, run_jobs, probes):
    task_id = start_task("cancel_probe", {"call": "report"})

    def expire_now() -> None:
        Task.objects.filter(pk=task_id).update(expires_at=timezone.now() - MS)
        assert sweeps.expire_tasks() == 1

    probes.HOOKS["between"] = expire_now
    run_jobs()
    got = get_task(mcp, task_id)
    assert got["status"] == "failed" and got["error"] == EXPIRED
    assert probes.REACHED == ["before report"]  # the attempt stopped at its next ctx call
    assert count(task_id, "task.completed") == 0


def test_a_terminal_task_is_purged_only_after_the_grace_period(
    mcp, clock, completed_task, settings
):
    settings.MCPTASKS_TERMINAL_GRACE_S = 600
    task_id = completed_task()
    TaskStep.objects.create(task_id=task_id, key="now#1", kind="now", value="x")
    deadline = created_at(task_id) + ttl_of(mcp, task_id)
    clock.move_to(deadline + timedelta(seconds=1))
    assert sweeps.expire_tasks() == 0
    assert get_task(mcp, task_id)["status"] == "completed"  # past TTL: terminal never changes
    clock.move_to(deadline + timedelta(seconds=600) - MS)
    assert sweeps.purge_tasks() == 0
    assert get_task(mcp, task_id)["status"] == "completed"
    clock.move_to(deadline + timedelta(seconds=600) + MS)
    assert sweeps.purge_tasks() == 1
    for method, params in (
        ("tasks/get", {}),
        ("tasks/cancel", {}),
        ("tasks/update", {"inputResponses": {}}),
    ):
        assert mcp.call(method, {"taskId": task_id, **params}).error == NOT_FOUND
    assert not Task.objects.filter(pk=task_id).exists()
    assert not TaskStep.objects.filter(task_id=task_id).exists()
    # Audit outlives the task.
    actions = list(
        AuditEvent.objects.filter(task_id=task_id).order_by("id").values_list("action", flat=True)
    )
    assert actions[0] == "task.created" and actions[-1] == "task.purged"
    assert sweeps.purge_tasks() == 0


def test_an_expired_task_is_later_purged(mcp, clock, waiting_task, settings):
    settings.MCPTASKS_TERMINAL_GRACE_S = 60
    task_id = waiting_task()
    deadline = created_at(task_id) + ttl_of(mcp, task_id)
    clock.move_to(deadline + MS)
    assert sweeps.purge_tasks() == 0  # not terminal yet: never deleted
    assert sweeps.expire_tasks() == 1
    assert sweeps.purge_tasks() == 0  # terminal, but inside the grace period
    assert get_task(mcp, task_id)["error"] == EXPIRED
    clock.move_to(deadline + timedelta(seconds=61))
    assert sweeps.purge_tasks() == 1
    assert InputRequest.objects.filter(task_id=task_id).count() == 0


def run_twice_at_once(sweep: Callable[[], int]) -> list[int]:
    """Run ``sweep`` in two threads released together; return what each reported."""
    barrier = threading.Barrier(2)
    done: list[int] = []
    errors: list[BaseException] = []

    def run() -> None:
        from django.db import connection

        try:
            barrier.wait()
            done.append(sweep())
        except BaseException as exc:  # reported by the test below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    return done


@pytest.mark.pg
def test_two_expiry_sweeps_at_once_expire_each_task_exactly_once(
    mcp, clock, waiting_task, start_task
):
    task_ids = [waiting_task() for _ in range(4)]
    task_ids += [start_task("echo_task", {"text": str(n)}) for n in range(8)]
    clock.move_to(max(created_at(t) for t in task_ids) + ttl_of(mcp, task_ids[0]) + MS)
    done = run_twice_at_once(sweeps.expire_tasks)
    assert sum(done) == len(task_ids)
    for task_id in task_ids:
        assert Task.objects.get(pk=task_id).state == TaskState.FAILED
        assert count(task_id, "task.expired") == 1
        assert count(task_id, "task.failed") == 0


@pytest.mark.pg
def test_two_purge_sweeps_at_once_delete_each_task_exactly_once(
    mcp, clock, completed_task, settings
):
    settings.MCPTASKS_TERMINAL_GRACE_S = 60
    task_ids = [completed_task() for _ in range(12)]
    clock.move_to(
        max(created_at(t) for t in task_ids) + ttl_of(mcp, task_ids[0]) + timedelta(seconds=61)
    )
    done = run_twice_at_once(sweeps.purge_tasks)
    assert sum(done) == len(task_ids)
    assert not Task.objects.filter(pk__in=task_ids).exists()
    for task_id in task_ids:
        assert count(task_id, "task.purged") == 1
