"""A worker keeps its database connections between tasks (mcptasks.celery.WorkerDatabaseFixup):
a connection the server dropped while it sat idle costs the next claim a retry on a fresh one,
not the task (runner.run_attempt through db_retry)."""

from __future__ import annotations

import time

import psycopg
import pytest
from django.db import connection

from mcptasks import runner
from mcptasks.models import Task, TaskState
from tests.faults.downstream import conninfo

pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


def _drop_this_threads_connection() -> None:
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    with psycopg.connect(conninfo(), autocommit=True) as killer:
        killer.execute("SELECT pg_terminate_backend(%s)", [pid])
        for _ in range(100):
            if not killer.execute(
                "SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]
            ).fetchone():
                return
            time.sleep(0.02)
    raise AssertionError("the backend was not terminated")


def test_a_claim_on_a_connection_dropped_while_idle_runs_on_a_fresh_one(make_task):
    task = make_task("alice")
    _drop_this_threads_connection()
    assert runner.run_task(task.pk) == TaskState.COMPLETED
    assert Task.objects.get(pk=task.pk).attempt == 1
