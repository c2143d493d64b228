"""A real Celery worker runs the jobs that task creation pushes to Redis in one LPUSH
(mcptasks/publish.py, issue 23): workers need nothing new."""

from __future__ import annotations

from typing import Any

import pytest

from mcptasks import dispatch
from mcptasks.models import Task, TaskState
from tests.faults import harness
from tests.faults.harness import wait_for

pytestmark = [
    pytest.mark.live,
    pytest.mark.pg,
    pytest.mark.redis,
    pytest.mark.django_db(transaction=True),
]


def test_a_celery_worker_runs_the_task_whose_job_was_pushed_in_one_lpush(
    make_cluster: Any,
    private_redis: harness.PrivateRedis,
    fault_tasks: harness.FaultTasks,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.MCPTASKS_EMBEDDED_WORKER = False  # this process delivers to Celery, as in production
    pushed: list[str | None] = []
    publisher = dispatch._publisher()
    publish = publisher.publish

    def recorded(name: str, kwargs: dict[str, Any]) -> str | None:
        pushed.append(publish(name, kwargs))
        return pushed[-1]

    monkeypatch.setattr(publisher, "publish", recorded)
    cluster = make_cluster(private_redis.url(0), private_redis.url(1))
    worker = cluster.start_worker("A")  # no beat: no sweep can deliver the task instead

    task_id = fault_tasks.create(steps=2, sleep_s=0, work_s=0)

    [celery_id] = pushed
    assert celery_id is not None, "the job went through apply_async, not the one-LPUSH path"
    wait_for(
        lambda: Task.objects.get(pk=task_id).state == TaskState.COMPLETED,
        60,
        "the worker to run the pushed job to completion",
    )
    assert celery_id in worker.log()  # the worker received this very message
