"""The demo's cloud_job gives up on a job its backend does not know (issue 20, point 3): after
UNKNOWN_JOB_S instead of polling it for ever; a job the backend forgets later has failed."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.utils import timezone

from mcptasks import lifecycle, runner
from mcptasks.models import Task, TaskState
from mcptasks.tools.demo import UNKNOWN_JOB_S
from mcptasks.tools.fakes import fake_cloud

pytestmark = pytest.mark.django_db(transaction=True)

S = TaskState


def _resume(task_id: str) -> str | None:
    lifecycle.task_wake(task_id=task_id)
    return runner.run_task(task_id)


def _forget_jobs() -> None:
    """Test set-up: the backend loses its job records (the keys it applied stay)."""
    with fake_cloud._state() as state:
        state["jobs"].clear()


def test_a_job_the_backend_never_knew_fails_the_task_after_a_bounded_time(
    make_task: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A backend that accepts the submission but never shows the job.
    monkeypatch.setattr(fake_cloud, "job_status", lambda job_id, duration_s=2.0: "unknown")
    origin = timezone.now()
    with time_machine.travel(origin, tick=False) as clock:
        task = make_task(tool_name="cloud_job", arguments={"spec": "x", "poll_seconds": 5})
        assert runner.run_task(task.pk) == S.SLEEPING
        polls = 0
        while Task.objects.get(pk=task.pk).state == S.SLEEPING:
            assert polls < UNKNOWN_JOB_S, "polled an unknown job without end"
            clock.shift(timedelta(seconds=5))
            _resume(task.pk)
            polls += 1
    row = Task.objects.get(pk=task.pk)
    assert row.state == S.COMPLETED and row.result.get("isError") is True
    assert "unknown to the backend after 30 s" in row.result["content"][0]["text"]
    assert polls <= UNKNOWN_JOB_S / 5 + 1


def test_a_job_the_backend_forgets_while_it_runs_has_failed(make_task: Any) -> None:
    origin = timezone.now()
    with time_machine.travel(origin, tick=False) as clock:
        task = make_task(tool_name="cloud_job", arguments={"spec": "x", "poll_seconds": 1})
        assert runner.run_task(task.pk) == S.SLEEPING  # known, still running
        _forget_jobs()
        clock.shift(timedelta(seconds=1))
        assert _resume(task.pk) == S.COMPLETED
    row = Task.objects.get(pk=task.pk)
    assert row.result.get("isError") is True
    assert "no longer known to the backend" in row.result["content"][0]["text"]
