"""B6 end to end: no-op task tools created, run by 2 Celery worker processes and completed,
against Celery's raw drain rate of a no-op job in the same run (PostgreSQL + Redis)."""

from __future__ import annotations

import subprocess
import time
from typing import Any

from bench.common import BIN, REPO, RESULTS, bench_env


def server_env(url: str) -> dict[str, str]:
    return bench_env(
        url,
        MCPTASKS_MAX_ACTIVE_TASKS_PER_PRINCIPAL="100000000",
        MCPTASKS_MAX_ACTIVE_TASKS_PER_TENANT="100000000",
    )


def run_end_to_end(url: str, count: int, results: dict[str, Any]) -> None:
    """B6: tasks/s of `count` no-op tasks through 2 workers vs Celery's raw drain rate."""
    import redis
    from django.db.models import Count  # noqa: F401

    from audit.record import Actor
    from mcptasks import lifecycle
    from mcptasks.models import Task, TaskState, Tenant

    env = server_env(url)
    client = redis.Redis.from_url("redis://127.0.0.1:6379/3")
    client.flushdb()
    logs = [open(RESULTS / f"worker{n}.log", "w") for n in range(2)]  # noqa: SIM115
    workers = [
        subprocess.Popen(
            [
                str(BIN / "celery"),
                "-A",
                "mcptasks",
                "worker",
                "-c",
                "1",
                "--pool=prefork",
                "-n",
                f"bench{n}@%h",
                "-l",
                "warning",
            ],
            cwd=REPO,
            env=env,
            stdout=logs[n],
            stderr=subprocess.STDOUT,
        )
        for n in range(2)
    ]
    try:
        time.sleep(6)
        from mcptasks.jobs import bench_noop

        started = time.perf_counter()
        for _ in range(count):
            bench_noop.delay()
        while int(client.get("mcptasks:bench:noop") or 0) < count:
            time.sleep(0.05)
        raw = count / (time.perf_counter() - started)
        tenant = Tenant.objects.get(slug="acme")
        from django.contrib.auth import get_user_model

        alice = get_user_model().objects.get(username="alice")
        started = time.perf_counter()
        ids = []
        for _ in range(count):
            task, _ = lifecycle.task_create(
                spec=lifecycle.NewTask(
                    tenant_id=tenant.pk,
                    principal_id=alice.pk,
                    tool_name="echo_task",
                    arguments={"text": "e2e"},
                    policy_revision="bench",
                    ttl_ms=None,
                ),
                actor=Actor.system("bench"),
            )
            ids.append(task.pk)
        while Task.objects.filter(pk__in=ids, state=TaskState.COMPLETED).count() < count:
            time.sleep(0.2)
        ours = count / (time.perf_counter() - started)
        results["B6"] = {"tasks_per_s": ours, "raw_drain_per_s": raw, "ratio": ours / raw}
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=20)
