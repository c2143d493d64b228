"""B4 for the operations page (issue 22): its server time with 100,000 tasks vs 1,000.

    .venv/bin/python bench/operations_timing.py [--small 1000] [--large 100000] [--runs 30]

One throwaway PostgreSQL database (``BENCH_PG_SERVER``, default postgres://postgres@127.0.0.1:5432).
The work the page shows is the same at both sizes — 200 queued, 50 running (5 leases about to
run out), 100 sleeping, 50 awaiting input, 330 ended in the last hour, 4 workers — so the ratio
measures what the size of the task table costs: the rest are tasks that ended before the last
hour, 35 days of them. Timed first with ``--small`` tasks, then after adding the rest up to
``--large`` (ANALYZE after each seeding): ``/operations`` as an operator through Django's full
request cycle, and ``/metrics`` (the same figures), median of ``--runs``. Target ≤ 1.2×.
Results: bench/results/operations_timing.json.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pg import dedicated_database, migrate, setup_django

RESULTS = Path(__file__).resolve().parent / "results"
TARGET = 1.2
BATCH = 5000
TOOLS = ("deploy_service", "run_pipeline", "export_dataset", "cloud_job")
ACTIVE = {"queued": 200, "running": 50, "sleeping": 100, "awaiting_input": 50}
ENDED_LAST_HOUR = {"completed": 300, "failed": 30}
OLD_STATES = ("completed",) * 17 + ("failed", "cancelled")


def _task(rng: random.Random, owners: dict[int, list[int]], state: str, updated: datetime) -> Any:
    from mcptasks.models import Task, new_task_id

    tenant_id = rng.choice(list(owners))
    return Task(
        id=new_task_id(),
        tenant_id=tenant_id,
        principal_id=rng.choice(owners[tenant_id]),
        tool_name=rng.choice(TOOLS),
        arguments={"n": 1},
        argument_digest="0" * 64,
        server_build="0.1.0+bench",
        policy_revision="p1",
        state=state,
        status_message="",
        ttl_ms=86_400_000,
        created_at=updated - timedelta(seconds=30),
        updated_at=updated,
        expires_at=updated + timedelta(days=1),
        attempt=1,
        version=3,
    )


def seed_active(rng: random.Random, owners: dict[int, list[int]]) -> int:
    """What the page shows (the same at every size); returns the number of tasks."""
    from mcptasks.keeper import beat
    from mcptasks.models import Task

    now = datetime.now(UTC)
    rows = []
    for state, count in ACTIVE.items():
        for number in range(count):
            task = _task(rng, owners, state, now - timedelta(seconds=rng.uniform(1, 3000)))
            if state == "running":
                task.lease_owner = f"host:{number % 4}:1"
                task.lease_expires_at = now + timedelta(seconds=2 if number < 5 else 600)
            rows.append(task)
    for state, count in ENDED_LAST_HOUR.items():
        rows += [
            _task(rng, owners, state, now - timedelta(seconds=rng.uniform(1, 3500)))
            for _ in range(count)
        ]
    Task.objects.bulk_create(rows, batch_size=BATCH)
    for number in range(4):
        beat(f"worker:bench{number}@host", pid=number, concurrency=4)
    return len(rows)


def seed_old(rng: random.Random, owners: dict[int, list[int]], count: int) -> None:
    """``count`` tasks that ended before the last hour, over 35 days."""
    from django.db import connection

    from mcptasks.models import Task

    newest = datetime.now(UTC) - timedelta(hours=2)
    batch = []
    for _ in range(count):
        updated = newest - timedelta(seconds=rng.uniform(0, 35 * 86_400))
        batch.append(_task(rng, owners, rng.choice(OLD_STATES), updated))
        if len(batch) >= BATCH:
            Task.objects.bulk_create(batch)
            batch = []
    Task.objects.bulk_create(batch)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def time_url(client: Any, url: str, runs: int) -> dict[str, Any]:
    from django.db import connection

    for _ in range(5):
        assert client.get(url, secure=True).status_code == 200, url
    queries: list[tuple[float, str]] = []

    def timed(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        began = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            queries.append(((time.perf_counter() - began) * 1000, sql))

    with connection.execute_wrapper(timed):
        client.get(url, secure=True)
    samples = []
    for _ in range(runs):
        began = time.perf_counter()
        response = client.get(url, secure=True)
        samples.append((time.perf_counter() - began) * 1000)
        assert response.status_code == 200
    return {
        "median_ms": round(statistics.median(samples), 2),
        "db_ms": round(sum(ms for ms, _ in queries), 2),
        "queries": len(queries),
        "slowest": [
            {"ms": round(ms, 2), "sql": sql[:300]} for ms, sql in sorted(queries, reverse=True)[:3]
        ],
    }


def measure(client: Any, runs: int) -> dict[str, Any]:
    from mcptasks.models import Task

    return {
        "tasks": Task.objects.count(),
        "operations": time_url(client, "/operations", runs),
        "metrics": time_url(client, "/metrics", runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    options = parser.parse_args()
    with dedicated_database(keep=options.keep) as url:
        setup_django(url)
        migrate()
        from django.conf import settings
        from django.db import connections
        from django.test import Client

        from mcptasks.management.commands.seed_demo import seed_cast

        settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
        rng = random.Random(22)
        cast = seed_cast()
        owners = {
            cast["alice"]["tenant"].pk: [cast["alice"]["user"].pk, cast["adam"]["user"].pk],
            cast["bob"]["tenant"].pk: [cast["bob"]["user"].pk],
        }
        active = seed_active(rng, owners)
        seed_old(rng, owners, options.small - active)
        client = Client()
        client.force_login(cast["olga"]["user"])
        small = measure(client, options.runs)
        print(f"{small['tasks']:,} tasks: {small}", flush=True)
        seed_old(rng, owners, options.large - options.small)
        large = measure(client, options.runs)
        print(f"{large['tasks']:,} tasks: {large}", flush=True)
        connections.close_all()
    ratios = {
        page: large[page]["median_ms"] / small[page]["median_ms"]
        for page in ("operations", "metrics")
    }
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "operations_timing.json"
    out.write_text(
        json.dumps(
            {"machine": load, "small": small, "large": large, "ratio": ratios, "target": TARGET},
            indent=2,
        )
    )
    for page, ratio in ratios.items():
        mark = "ok" if ratio <= TARGET else "SLOW"
        print(
            f"{mark:4} B4 /{page:10} {large[page]['median_ms']:6.1f} ms at {large['tasks']:,} "
            f"tasks vs {small[page]['median_ms']:6.1f} ms at {small['tasks']:,} → {ratio:.2f}× "
            f"(target ≤ {TARGET}×)"
        )
    print(f"machine: {load}; results: {out}")
    sys.exit(0 if all(r <= TARGET for r in ratios.values()) else 1)


if __name__ == "__main__":
    main()
