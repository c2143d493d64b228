#!/usr/bin/env python
"""kill -9 a Celery worker at random points of a multi-step tool, N times (issue 5), standalone.

Creates a database of its own on the PostgreSQL server, migrates it, starts two worker processes
and beat against it and Redis database 15 (flushed), then, N times: starts a ``fault_steps``
task (five idempotent effects with durable sleeps between), kills -9 the worker running it at a
random moment (its pool child, or the whole worker, which is then restarted) and waits for the
task to end. Prints the figures and exits non-zero if any task missed the bound (lease + sweep
+ 10 s after its kill), lost a recorded step outcome, or left a gap in the audit trail.

    .venv/bin/python scripts/fault_kill_loop.py --iterations 100

tests/faults/test_kill.py runs the same iteration a few times in CI.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

REPO = Path(__file__).resolve().parents[1]
BROKER_DB = 15


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument(
        "--server",
        default="postgres://postgres@127.0.0.1:5432/postgres",
        help="a PostgreSQL URL to create the run's database from",
    )
    parser.add_argument(
        "--redis",
        default="redis://127.0.0.1:6379",
        help=f"the Redis server (database {BROKER_DB} is flushed and used)",
    )
    parser.add_argument("--seed", default="5")
    parser.add_argument("--keep", action="store_true", help="keep the database and the logs")
    return parser.parse_args()


def configure(args: argparse.Namespace, database: str, workdir: Path) -> str:
    """Environment of this process and of the workers; returns the run's DATABASE_URL."""
    server = urlparse(args.server)
    database_url = server._replace(path=f"/{database}").geturl()
    broker = f"{args.redis.rstrip('/')}/{BROKER_DB}"
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "mcptasks.settings",
            "DATABASE_URL": database_url,
            "REDIS_URL": broker,
            "CHANNEL_REDIS_URL": broker,
            "SECRET_KEY": os.environ.get("SECRET_KEY") or "fault-loop-secret-key",
            "MCPTASKS_REQUEST_STATE_KEY": os.environ.get("MCPTASKS_REQUEST_STATE_KEY") or "x",
            "MCPTASKS_AUDIT_SIGNING_KEY": os.environ.get("MCPTASKS_AUDIT_SIGNING_KEY") or "x",
            "MCPTASKS_TOOL_PACKS": "mcptasks.tools.demo,tests.toolpack",
            "MCPTASKS_VAR_DIR": str(workdir / "var"),
            "MCPTASKS_LEASE_S": "3",
            "MCPTASKS_SWEEP_INTERVAL_S": "0.5",
        }
    )
    return database_url


def admin(args: argparse.Namespace, statement: Any) -> None:
    import psycopg

    with psycopg.connect(args.server, autocommit=True) as conn:
        conn.execute(statement)


def main() -> int:
    args = parse_args()
    sys.path.insert(0, str(REPO))
    import psycopg
    from psycopg import sql

    database = f"mcptasks_faultloop_{os.getpid()}"
    workdir = Path(tempfile.mkdtemp(prefix="fault-kill-loop-"))
    (workdir / "var").mkdir()
    database_url = configure(args, database, workdir)
    admin(args, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    cluster = None
    try:
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection

        from mcptasks.management.commands.seed_demo import seed_cast
        from tests.faults import checks, downstream, harness, kill_loop

        call_command("migrate", verbosity=0)
        cast = seed_cast()
        conn = psycopg.connect(downstream.conninfo(), autocommit=True)
        downstream.install(conn)
        harness.flush_redis(os.environ["REDIS_URL"])
        cluster = harness.Cluster(
            database_url=database_url,
            broker_url=os.environ["REDIS_URL"],
            channel_url=os.environ["CHANNEL_REDIS_URL"],
            workdir=workdir,
            tool_packs=os.environ["MCPTASKS_TOOL_PACKS"].split(","),
        )
        cluster.start_workers("A", "B")
        cluster.start_beat()
        tasks = harness.FaultTasks(cast)
        rng = random.Random(args.seed)
        started = time.monotonic()
        records: list[kill_loop.KillRecord] = []
        missed = failures = 0
        while len(records) < args.iterations:
            try:
                record = kill_loop.run_iteration(cluster, tasks, rng)
            except AssertionError as exc:
                failures += 1
                print(f"iteration {len(records) + 1}: {exc}", flush=True)
                continue
            if record is None:
                missed += 1
                continue
            records.append(record)
            if len(records) % 10 == 0:
                print(f"{len(records)} kills, last settled in {record.settle_s:.2f} s", flush=True)
        kill_loop.count_calls(conn, records)
        task_ids = [r.task_id for r in records]
        problems = checks.outcome_problems(task_ids, conn, steps=kill_loop.STEPS, sleeps=True)
        gaps = checks.audit_gaps()
        stale = sum(cluster.stale_warnings().values())
        print(kill_loop.summary(records, missed, stale, time.monotonic() - started))
        print(f"iterations that failed a bound: {failures}")
        print(
            f"tasks with a lost or inconsistent step outcome: "
            f"{len({p.split(':')[0] for p in problems})}"
        )
        print(f"audit chain problems (gaps, broken links): {len(gaps)}")
        for line in [*problems, *gaps][:20]:
            print(f"  {line}")
        print("slowest kills:\n" + kill_loop.slowest(records))
        conn.close()
        downstream.close()
        connection.close()
        if hasattr(connection, "close_pool"):
            connection.close_pool()
        return 1 if failures or problems or gaps else 0
    finally:
        if cluster is not None:
            cluster.stop_all()
        if args.keep:
            print(f"kept database {database} and logs in {workdir}")
        else:
            admin(
                args,
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)),
            )


if __name__ == "__main__":
    sys.exit(main())
