"""A Celery worker keeps its database connections, and Django's pool, from one task to the next
(mcptasks.celery.WorkerDatabaseFixup; issue 23: Celery's own fix-up closed the pool of a
prefork child around every task)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from celery.fixups.django import DjangoWorkerFixup
from django.db import connection

from mcptasks.celery import WorkerDatabaseFixup, app

TASK = SimpleNamespace(request=SimpleNamespace(is_eager=False))
PREFORK = SimpleNamespace(pool_cls="celery.concurrency.prefork:TaskPool")


def _run_one_task(fixup: DjangoWorkerFixup) -> None:
    fixup.on_task_prerun(TASK)
    with connection.cursor() as cursor:  # the task's queries
        cursor.execute("SELECT 1")
    fixup.on_task_postrun(TASK)


def _pool() -> Any:
    """Django's psycopg pool of the default database (PostgreSQL with DATABASE_POOL)."""
    return connection.pool  # type: ignore[attr-defined]


def _worker_fixup() -> WorkerDatabaseFixup:
    fixup = WorkerDatabaseFixup(app)
    fixup.worker = PREFORK
    return fixup


def test_the_app_installs_the_worker_fixup_that_keeps_connections():
    (fixup,) = app._fixups
    assert isinstance(fixup.worker_fixup, WorkerDatabaseFixup)


@pytest.mark.django_db(transaction=True)
def test_a_task_end_keeps_a_usable_persistent_connection(settings):
    if connection.vendor != "sqlite":
        pytest.skip(
            "SQLite only: on PostgreSQL the connection comes from the pool (the prefork pool test)"
        )
    connection.ensure_connection()
    raw = connection.connection
    _run_one_task(_worker_fixup())
    assert connection.connection is raw


@pytest.mark.django_db(transaction=True)
def test_a_task_end_closes_a_connection_left_in_a_transaction():
    connection.ensure_connection()
    connection.set_autocommit(False)  # a task that left a transaction open
    try:
        _worker_fixup().on_task_postrun(TASK)
        assert connection.connection is None
    finally:
        connection.ensure_connection()
        connection.set_autocommit(True)


@pytest.mark.django_db(transaction=True)
def test_a_task_end_closes_a_broken_connection(monkeypatch):
    connection.ensure_connection()
    # What a dropped server connection looks like to Django: an error, then not usable.
    connection.errors_occurred = True
    monkeypatch.setattr(connection, "is_usable", lambda: False)
    _worker_fixup().on_task_postrun(TASK)
    assert connection.connection is None


def test_an_eager_task_leaves_connections_alone(monkeypatch):
    closed = []
    monkeypatch.setattr("mcptasks.celery.close_old_connections", lambda: closed.append(1))
    eager = SimpleNamespace(request=SimpleNamespace(is_eager=True))
    fixup = _worker_fixup()
    fixup.on_task_prerun(eager)
    fixup.on_task_postrun(eager)
    assert closed == []


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_a_prefork_child_keeps_its_pool_from_one_task_to_the_next():
    pool = _pool()
    assert pool is not None, "the PostgreSQL default uses Django's pool (DATABASE_POOL)"
    _run_one_task(_worker_fixup())
    _run_one_task(_worker_fixup())
    assert _pool() is pool
    assert not pool.closed
    assert connection.connection is None  # back in the pool (CONN_MAX_AGE 0 with a pool)


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_celerys_own_worker_fixup_would_close_the_pool_around_every_task():
    """Why WorkerDatabaseFixup exists: if this starts failing, Celery fixed celery#10554 and
    the override may go."""
    pool = _pool()
    celerys = DjangoWorkerFixup(app)
    celerys.worker = PREFORK
    _run_one_task(celerys)
    assert pool.closed
