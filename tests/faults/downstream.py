"""A fake downstream service for the fault tests, kept in PostgreSQL so every process sees it.

It honours idempotency keys (the first call with a key applies it; later calls return the
stored result) and logs every call it receives, with the process and the attempt that made it,
so a test can count executions per step. It talks to the database on its own connection
(``application_name`` ``fault-downstream``), outside the task's transactions, like a real
external service; the PostgreSQL fault test never terminates it.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

CALLS = "fault_downstream_call"
APPLIED = "fault_downstream_applied"
APP_NAME = "fault-downstream"

SCHEMA = (
    f"""CREATE TABLE IF NOT EXISTS {CALLS} (
        id bigserial PRIMARY KEY, key text NOT NULL, task_id text NOT NULL, step text NOT NULL,
        attempt integer NOT NULL, pid integer NOT NULL,
        at timestamptz NOT NULL DEFAULT clock_timestamp())""",
    f"CREATE INDEX IF NOT EXISTS {CALLS}_key ON {CALLS} (key)",
    f"""CREATE TABLE IF NOT EXISTS {APPLIED} (
        key text PRIMARY KEY, task_id text NOT NULL, step text NOT NULL, payload jsonb NOT NULL,
        result jsonb NOT NULL, attempt integer NOT NULL, pid integer NOT NULL,
        at timestamptz NOT NULL DEFAULT clock_timestamp())""",
)

_local = threading.local()


def conninfo(settings_dict: dict[str, Any] | None = None) -> str:
    """The libpq conninfo of the Django default database (the test database in a test)."""
    if settings_dict is None:
        from django.db import connection

        settings_dict = connection.settings_dict
    parts = {
        "dbname": settings_dict["NAME"],
        "user": settings_dict.get("USER") or "",
        "host": settings_dict.get("HOST") or "",
        "port": settings_dict.get("PORT") or "",
        "password": settings_dict.get("PASSWORD") or "",
    }
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in parts.items() if v})


def _connection() -> psycopg.Connection[Any]:
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed or getattr(_local, "pid", None) != os.getpid():
        conn = psycopg.connect(conninfo(), autocommit=True, application_name=APP_NAME)
        _local.conn, _local.pid = conn, os.getpid()
    return conn


def close() -> None:
    """Close this thread's connection (the test database cannot be dropped while it is open)."""
    conn = getattr(_local, "conn", None)
    if conn is not None and getattr(_local, "pid", None) == os.getpid():
        conn.close()
    _local.conn = None


def call(key: str, *, payload: dict[str, Any], work_s: float, attempt: int) -> dict[str, Any]:
    """Apply ``key`` once; return the result of its first application.

    The work is split around the application, so a worker killed during the call may leave the
    key applied or not: both outcomes of an in-flight effect get exercised.
    """
    task_id, _, step = key.rpartition(":")
    conn = _connection()
    conn.execute(
        f"INSERT INTO {CALLS} (key, task_id, step, attempt, pid) VALUES (%s, %s, %s, %s, %s)",
        (key, task_id, step, attempt, os.getpid()),
    )
    time.sleep(work_s / 2)
    result = {
        "applied_id": uuid.uuid4().hex,
        "payload": payload,
        "attempt": attempt,
        "pid": os.getpid(),
    }
    conn.execute(
        f"INSERT INTO {APPLIED} (key, task_id, step, payload, result, attempt, pid) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (key) DO NOTHING",
        (key, task_id, step, Jsonb(payload), Jsonb(result), attempt, os.getpid()),
    )
    row = conn.execute(f"SELECT result FROM {APPLIED} WHERE key = %s", (key,)).fetchone()
    time.sleep(work_s / 2)
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


# ---------------------------------------------------------------- the tests' side
def install(conn: psycopg.Connection[Any]) -> None:
    for statement in SCHEMA:
        conn.execute(statement)
    conn.execute(f"TRUNCATE {CALLS}, {APPLIED}")


def calls_per_key(conn: psycopg.Connection[Any], task_ids: list[str]) -> dict[str, int]:
    rows = conn.execute(
        f"SELECT key, count(*) FROM {CALLS} WHERE task_id = ANY(%s) GROUP BY key", (task_ids,)
    ).fetchall()
    return dict(rows)


def applied(conn: psycopg.Connection[Any], task_ids: list[str]) -> dict[str, dict[str, Any]]:
    rows = conn.execute(
        f"SELECT key, result FROM {APPLIED} WHERE task_id = ANY(%s)", (task_ids,)
    ).fetchall()
    return dict(rows)
