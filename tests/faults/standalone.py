"""What scripts/fault_kill_loop.py and scripts/effect_crash_loop.py share: their own database on
a PostgreSQL server (created, migrated, dropped), the environment of the run and its worker
processes (lease 3 s, sweeps every 0.5 s), the demo cast, and a Redis database of their own
(flushed). Both default to the machine's Redis; pass ``--redis`` to use another server."""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from tests.faults import harness


def add_arguments(parser: argparse.ArgumentParser, redis_db: int) -> None:
    parser.add_argument(
        "--server",
        default="postgres://postgres@127.0.0.1:5432/postgres",
        help="a PostgreSQL URL to create the run's database from",
    )
    parser.add_argument(
        "--redis",
        default="redis://127.0.0.1:6379",
        help=f"the Redis server (database {redis_db} is flushed and used)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the database and the logs")


@dataclass
class Run:
    args: argparse.Namespace
    database: str
    database_url: str
    workdir: Path
    redis_url: str
    cast: dict[str, dict[str, Any]] = field(default_factory=dict)
    clusters: list[harness.Cluster] = field(default_factory=list)

    def cluster(self, **extra_env: str) -> harness.Cluster:
        cluster = harness.Cluster(
            database_url=self.database_url,
            broker_url=self.redis_url,
            channel_url=self.redis_url,
            workdir=self.workdir,
            tool_packs=os.environ["MCPTASKS_TOOL_PACKS"].split(","),
            extra_env=extra_env,
        )
        self.clusters.append(cluster)
        return cluster


def _admin(server: str, statement: Any) -> None:
    import psycopg

    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(statement)


@contextmanager
def standalone(
    args: argparse.Namespace, name: str, redis_db: int, env: dict[str, str] | None = None
) -> Iterator[Run]:
    """Set the run up (database, environment, Django, migrations, cast, flushed Redis); end
    every worker and drop the database afterwards (unless ``--keep``)."""
    from psycopg import sql

    database = f"mcptasks_{name}_{os.getpid()}"
    workdir = Path(tempfile.mkdtemp(prefix=f"{name}-"))
    (workdir / "var").mkdir()
    database_url = urlparse(args.server)._replace(path=f"/{database}").geturl()
    redis_url = f"{args.redis.rstrip('/')}/{redis_db}"
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "mcptasks.settings",
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "CHANNEL_REDIS_URL": redis_url,
            "MCPTASKS_LIMITS_REDIS_URL": redis_url,
            "SECRET_KEY": os.environ.get("SECRET_KEY") or f"{name}-secret-key",
            "MCPTASKS_REQUEST_STATE_KEY": os.environ.get("MCPTASKS_REQUEST_STATE_KEY") or "x",
            "MCPTASKS_AUDIT_SIGNING_KEY": os.environ.get("MCPTASKS_AUDIT_SIGNING_KEY") or "x",
            "MCPTASKS_TOOL_PACKS": "mcptasks.tools.demo,tests.toolpack",
            "MCPTASKS_VAR_DIR": str(workdir / "var"),
            "MCPTASKS_FAKE_CLOUD": str(workdir / "fake_cloud.json"),
            "MCPTASKS_LEASE_S": str(harness.LEASE_S),
            "MCPTASKS_SWEEP_INTERVAL_S": str(harness.SWEEP_S),
            "MCPTASKS_RECONCILE_MARGIN_S": str(harness.RECONCILE_MARGIN_S),
            "MCPTASKS_MAX_ACTIVE_TASKS_PER_PRINCIPAL": "100000",
            "MCPTASKS_MAX_ACTIVE_TASKS_PER_TENANT": "100000",
            **(env or {}),
        }
    )
    _admin(args.server, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    run = Run(args, database, database_url, workdir, redis_url)
    try:
        import django

        django.setup()
        from django.core.management import call_command

        from mcptasks.management.commands.seed_demo import seed_cast

        call_command("migrate", verbosity=0)
        run.cast = seed_cast()
        harness.flush_redis(redis_url)
        yield run
    finally:
        for cluster in run.clusters:
            cluster.stop_all()
        from django.db import connection

        connection.close()
        if hasattr(connection, "close_pool"):
            connection.close_pool()
        if args.keep:
            print(f"kept database {database} and logs in {workdir}")
        else:
            _admin(
                args.server,
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)),
            )
