"""B6 end to end: no-op task tools created, run by 2 Celery worker processes and completed,
against Celery's raw drain rate of a no-op job in the same run (PostgreSQL + Redis)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import (
    REPO,
    RESULTS,
    bench_database,
    bench_env,
    process_stats,
    tree_cpu_s,
    worker_argv,
)


def server_env(url: str) -> dict[str, str]:
    return bench_env(
        url,
        MCPTASKS_MAX_ACTIVE_TASKS_PER_PRINCIPAL="100000000",
        MCPTASKS_MAX_ACTIVE_TASKS_PER_TENANT="100000000",
    )


def run_end_to_end(url: str, count: int, results: dict[str, Any]) -> None:
    """B6: tasks/s of `count` no-op tasks through 2 workers vs Celery's raw drain rate.

    Both sides have the same shape: one process enqueues (or creates) serially, 2 solo worker
    processes (as documented for production) drain, and completion is polled every POLL_S; each side is warmed up
    first with WARM_UP jobs that are not timed.
    """
    import redis

    from bench.noop_job import NOOP_COUNTER, bench_noop

    env = server_env(url)
    client = redis.Redis.from_url(env["REDIS_URL"])
    client.flushdb()
    logs = [open(RESULTS / f"worker{n}.log", "w") for n in range(2)]  # noqa: SIM115
    workers = [
        subprocess.Popen(
            worker_argv(f"bench{n}", "--include", "bench.noop_job"),
            cwd=REPO,
            env=env,
            stdout=logs[n],
            stderr=subprocess.STDOUT,
        )
        for n in range(2)
    ]
    try:
        time.sleep(6)

        def drain(jobs: int) -> float:
            client.delete(NOOP_COUNTER)
            started = time.perf_counter()
            for _ in range(jobs):
                bench_noop.delay()
            while int(client.get(NOOP_COUNTER) or 0) < jobs:
                time.sleep(POLL_S)
            return time.perf_counter() - started

        drain(WARM_UP)
        cpu_before, split_before = _cpu_s(workers), _cpu_split(workers)
        raw = count / drain(count)
        raw_cpu = _cpu_s(workers) - cpu_before
        raw_split = {k: v - split_before.get(k, 0.0) for k, v in _cpu_split(workers).items()}
        create_one = _task_creator()
        _run_tasks(create_one, WARM_UP)
        cpu_before, create_cpu = _cpu_s(workers), time.process_time()
        split_before = _cpu_split(workers)
        ours_s, created_s = _run_tasks(create_one, count)
        ours_cpu, create_cpu = _cpu_s(workers) - cpu_before, time.process_time() - create_cpu
        split = {k: v - split_before.get(k, 0.0) for k, v in _cpu_split(workers).items()}
        ours = count / ours_s
        results["B6"] = {
            "tasks_per_s": ours,
            "raw_drain_per_s": raw,
            "ratio": ours / raw,
            "create_s": created_s,
            # CPU time, which a busy shared machine disturbs far less than the wall clock:
            # the workers' (pool processes included) per task and per no-op job, and this
            # process's per creation (its polling of completions included).
            "worker_cpu_ms_per_task": 1000 * ours_cpu / count,
            "worker_cpu_ms_per_noop_job": 1000 * raw_cpu / count,
            "creator_cpu_ms_per_task": 1000 * create_cpu / count,
            # The same workers' CPU by process (Celery's main processes; pool children, which the
            # solo pool has none of)
            # and by kind (user, system: the kernel's share, sockets mostly).
            "worker_cpu_ms_per_task_split": {k: 1000 * v / count for k, v in split.items()},
            "worker_cpu_ms_per_noop_job_split": {k: 1000 * v / count for k, v in raw_split.items()},
        }
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=20)


def _cpu_s(workers: list[subprocess.Popen[bytes]]) -> float:
    """User + system CPU seconds of the worker processes and their pool children so far."""
    return tree_cpu_s({worker.pid for worker in workers})


def _cpu_split(workers: list[subprocess.Popen[bytes]]) -> dict[str, float]:
    """CPU seconds so far of the workers' main processes and of their pool children, user and
    system apart (a child that exited is not counted: the pools do not recycle children here)."""
    tick = os.sysconf("SC_CLK_TCK")
    mains = {worker.pid for worker in workers}
    split: dict[str, float] = {}
    for pid, fields in process_stats():
        role = "main" if pid in mains else "pool" if int(fields[1]) in mains else ""
        if role:
            for kind, index in (("user", 11), ("system", 12)):
                key = f"{role}_{kind}"
                split[key] = split.get(key, 0.0) + int(fields[index]) / tick
    return split


POLL_S = 0.05
WARM_UP = 50


def _task_creator() -> Callable[[], str]:
    """Create one echo_task as tools/call does (the tool's policy revision, TTL, poll interval,
    sensitive keys; the principal as actor); return its id."""
    from audit.record import Actor
    from mcptasks import lifecycle
    from mcptasks.models import Membership
    from mcptasks.tools.registry import registry

    membership = Membership.objects.select_related("user", "tenant").get(
        user__username="alice", tenant__slug="acme"
    )
    tool = registry.get("echo_task")
    assert tool is not None, "bench needs MCPTASKS_TOOL_PACKS to include tests.toolpack"
    actor = Actor.for_user(membership.user, kind="principal")

    def create_one() -> str:
        task, _ = lifecycle.task_create(
            spec=lifecycle.NewTask(
                tenant_id=membership.tenant_id,
                principal_id=membership.user_id,
                tool_name=tool.name,
                arguments={"text": "e2e"},
                policy_revision=tool.policy_revision,
                ttl_ms=tool.effective_ttl_ms(),
                poll_interval_ms=tool.effective_poll_interval_ms(),
                sensitive_keys=tool.sensitive,
            ),
            actor=actor,
        )
        return task.pk

    return create_one


def _run_tasks(create_one: Callable[[], str], count: int) -> tuple[float, float]:
    """Create ``count`` tasks serially, wait until all completed; return (total s, creation s)."""
    from mcptasks.models import Task, TaskState

    started = time.perf_counter()
    remaining = {create_one() for _ in range(count)}
    created = time.perf_counter() - started
    while remaining:
        time.sleep(POLL_S)
        remaining -= set(
            Task.objects.filter(pk__in=remaining, state=TaskState.COMPLETED).values_list(
                "pk", flat=True
            )
        )
    return time.perf_counter() - started, created


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=2000)
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    with bench_database(f"mcptasks_bench_e2e_{os.getpid()}") as url:
        os.environ.update(server_env(url))
        import django

        django.setup()
        from django.db import connections, transaction

        from mcptasks.management.commands.seed_demo import seed_cast

        with transaction.atomic():
            seed_cast()
        run_end_to_end(url, args.count, results)
        connections.close_all()
    (RESULTS / "end_to_end.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
