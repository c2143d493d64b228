#!/usr/bin/env python
"""kill -9 a Celery worker around an effect, N times per case (issue 6), standalone.

The cases: an idempotent and a non-idempotent effect, each killed between ``intended`` and the
downstream call and between the downstream call and ``applied`` (tests/effects/crash.py). The
kill points are exact: the effect holds at a mark it writes into the fake downstream, and the
pool process that wrote it is SIGKILLed there. Idempotent effects must complete with every key
applied once downstream; non-idempotent ones must wait in needs_reconciliation until olga
reconciles them (truthfully: not_applied, or applied with the downstream's reference), then
complete; a second decision on an effect must be refused.

Creates a database of its own on the PostgreSQL server, migrates it, starts two worker
processes (four pool processes each) and beat against it and Redis database 2 (flushed),
runs the kills four at a time (one per case), prints the figures, and exits non-zero if any
iteration broke a promise or an audit chain.

    .venv/bin/python scripts/effect_crash_loop.py --iterations 50

tests/effects/test_crash.py runs the same iterations a few times per case in CI.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

REPO = Path(__file__).resolve().parents[1]
REDIS_DB = 2
TIMEOUT_S = 120.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=50, help="kills per case")
    parser.add_argument(
        "--server",
        default="postgres://postgres@127.0.0.1:5432/postgres",
        help="a PostgreSQL URL to create the run's database from",
    )
    parser.add_argument(
        "--redis",
        default="redis://127.0.0.1:6379",
        help=f"the Redis server (database {REDIS_DB} is flushed and used)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the database and the logs")
    return parser.parse_args()


def configure(args: argparse.Namespace, database: str, workdir: Path) -> str:
    """Environment of this process and of the workers; returns the run's DATABASE_URL."""
    server = urlparse(args.server)
    database_url = server._replace(path=f"/{database}").geturl()
    redis = f"{args.redis.rstrip('/')}/{REDIS_DB}"
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "mcptasks.settings",
            "DATABASE_URL": database_url,
            "REDIS_URL": redis,
            "CHANNEL_REDIS_URL": redis,
            "MCPTASKS_LIMITS_REDIS_URL": redis,
            "SECRET_KEY": os.environ.get("SECRET_KEY") or "effect-loop-secret-key",
            "MCPTASKS_REQUEST_STATE_KEY": os.environ.get("MCPTASKS_REQUEST_STATE_KEY") or "x",
            "MCPTASKS_AUDIT_SIGNING_KEY": os.environ.get("MCPTASKS_AUDIT_SIGNING_KEY") or "x",
            "MCPTASKS_TOOL_PACKS": "mcptasks.tools.demo,tests.toolpack",
            "MCPTASKS_VAR_DIR": str(workdir / "var"),
            "MCPTASKS_FAKE_CLOUD": str(workdir / "fake_cloud.json"),
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
    from psycopg import sql

    database = f"mcptasks_effectloop_{os.getpid()}"
    workdir = Path(tempfile.mkdtemp(prefix="effect-crash-loop-"))
    (workdir / "var").mkdir()
    database_url = configure(args, database, workdir)
    admin(args, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    cluster = None
    try:
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection

        from audit.record import Actor
        from mcptasks.management.commands.seed_demo import seed_cast
        from tests.effects import crash
        from tests.faults import checks, harness

        call_command("migrate", verbosity=0)
        cast = seed_cast()
        harness.flush_redis(os.environ["REDIS_URL"])
        cluster = harness.Cluster(
            database_url=database_url,
            broker_url=os.environ["REDIS_URL"],
            channel_url=os.environ["CHANNEL_REDIS_URL"],
            workdir=workdir,
            tool_packs=os.environ["MCPTASKS_TOOL_PACKS"].split(","),
        )
        crash.start_cluster(cluster)
        olga = Actor.for_user(cast["olga"]["user"], kind="operator")
        scenarios = [s for _ in range(args.iterations) for s in crash.SCENARIOS]

        def progress(done: list[crash.Iteration]) -> None:
            if len(done) % 40 == 0:
                print(
                    f"{len(done)} kills, the last settled in {done[-1].settled_s or 0.0:.2f} s",
                    flush=True,
                )

        started = time.monotonic()
        iterations = crash.run(
            cluster, crash.EffectTasks(cast), scenarios, olga, timeout=TIMEOUT_S, progress=progress
        )
        wall_s = time.monotonic() - started
        problems = crash.problems(iterations)
        gaps = checks.audit_gaps()
        print(crash.summary(iterations, wall_s))
        print(
            f"kill -> settled, all cases: "
            f"{checks.figures([it.settled_s or 0.0 for it in iterations])} "
            f"(bound {harness.SETTLE_S:.1f} s)"
        )
        print(f"iterations that broke a promise: {len({p.split(' ')[0] for p in problems})}")
        print(f"audit chain problems (gaps, broken links): {len(gaps)}")
        for line in [*problems, *gaps][:20]:
            print(f"  {line}")
        print("slowest recoveries:\n" + crash.slowest(iterations))
        connection.close()
        if hasattr(connection, "close_pool"):
            connection.close_pool()
        return 1 if problems or gaps else 0
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
