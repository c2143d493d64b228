"""Fair share on two real Celery workers (issue 22): a tenant flooding long tasks never holds
every worker. acme (capped at 1 running task by its tenant field, as an admin sets it) queues
FLOOD tasks that each hold a worker slot; globex's task, created after the flood, starts within
two lease intervals and completes, and acme's running count never exceeds its cap.

(The per-tool maximum run time of the same issue is enforced and tested under issue 20.)"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.faults import harness
from tests.faults.harness import LEASE_S, wait_for

pytestmark = [
    pytest.mark.live,
    pytest.mark.pg,
    pytest.mark.redis,
    pytest.mark.django_db(transaction=True),
]

FLOOD = 200
HOLD_S = 3.0
CAP = 1


def create(cast: dict[str, Any], owner: str, tool: str, **arguments: Any) -> str:
    return harness.FaultTasks(cast, tool).create(owner, **arguments)


def test_a_flooding_tenant_never_holds_every_worker(
    cluster: harness.Cluster, cast: dict[str, Any]
) -> None:
    from mcptasks.models import Task, TaskState

    acme = cast["adam"]["tenant"]
    acme.max_running_tasks = CAP
    acme.save()
    cluster.start_workers("A", "B")  # two slots in all
    cluster.start_beat()

    flood = [create(cast, "adam", "hold_worker", seconds=HOLD_S) for _ in range(FLOOD)]
    created = time.monotonic()
    victim = create(cast, "bob", "echo_task", text="not starved")

    acme_running: list[int] = []

    def sample() -> None:
        acme_running.append(Task.objects.filter(tenant_id=acme.pk, state=TaskState.RUNNING).count())

    def started() -> bool:
        sample()
        return Task.objects.get(pk=victim).attempt >= 1

    wait_for(started, 2 * LEASE_S, "globex's task to start while acme floods", interval=0.02)
    started_s = time.monotonic() - created

    def completed() -> bool:
        sample()
        return Task.objects.get(pk=victim).state == TaskState.COMPLETED

    wait_for(completed, 2 * LEASE_S, "globex's task to complete", interval=0.02)
    # acme keeps running (its queued work is redelivered as its running task ends), one at a
    # time: watch it take over the next of its tasks at least twice.
    wait_for(
        lambda: (
            sample() or Task.objects.filter(pk__in=flood, state=TaskState.COMPLETED).count() >= 2
        ),
        3 * HOLD_S + 2 * LEASE_S,
        "acme's queued tasks to keep running under its cap",
        interval=0.02,
    )

    assert max(acme_running) == CAP, f"acme never ran at its cap: {set(acme_running)}"
    assert all(n <= CAP for n in acme_running), f"acme exceeded its cap: {max(acme_running)}"
    print(f"globex's task started {started_s:.2f} s after acme's flood of {FLOOD}")


def test_workers_reap_an_expired_lease_while_redis_is_down(
    make_cluster: Any, private_redis: harness.PrivateRedis, cast: dict[str, Any]
) -> None:
    """Beat cannot send its sweeps while Redis is down: the workers' keepers run them."""
    from django.db.models.functions import Now

    from mcptasks import lifecycle
    from mcptasks.models import Task, TaskState

    cluster = make_cluster(private_redis.url(0), private_redis.url(1))
    worker = cluster.start_worker("A")
    cluster.start_beat()
    task_id = create(cast, "bob", "echo_task")
    wait_for(lambda: Task.objects.get(pk=task_id).state == TaskState.COMPLETED, 30, "a first task")
    private_redis.stop()
    # A task whose worker died: running, lease run out. Only a sweep gives it back.
    orphan = create(cast, "bob", "echo_task")
    lifecycle.task_claim(task_id=orphan, worker="dead-worker")
    Task.objects.filter(pk=orphan).update(lease_expires_at=Now())
    stopped = time.monotonic()
    wait_for(
        lambda: Task.objects.get(pk=orphan).state == TaskState.QUEUED,
        LEASE_S + 10,
        "a worker to reap the expired lease while Redis is down",
        interval=0.1,
    )
    print(f"reaped {time.monotonic() - stopped:.1f} s into the Redis outage")
    assert Task.objects.get(pk=orphan).lost_attempts == 1
    assert "running them in this worker" in worker.log()
    private_redis.start()
    wait_for(
        lambda: Task.objects.get(pk=orphan).state == TaskState.COMPLETED,
        60,
        "the reaped task to run once Redis is back",
    )
