"""How the ORM reaches PostgreSQL: values bound server-side and a statement run often prepared on
its connection; with ``MCPTASKS_DB_POOLER``, behind PgBouncer in transaction mode, no connection
keeps a prepared statement or a server-side cursor (tests/production/test_pgbouncer.py runs it
through one)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from mcptasks.conf import PREPARE_THRESHOLD, db_pooler, postgres_database

URL = "postgres://app@db:5432/mcptasks"


@pytest.mark.parametrize(("raw", "pooler"), [("", ""), ("none", ""), ("PgBouncer", "pgbouncer")])
def test_db_pooler_reads_none_or_pgbouncer(monkeypatch, raw, pooler):
    monkeypatch.setenv("MCPTASKS_DB_POOLER", raw)
    assert db_pooler() == pooler


def test_db_pooler_refuses_an_unknown_pooler_naming_the_variable(monkeypatch):
    monkeypatch.setenv("MCPTASKS_DB_POOLER", "pgpool")
    with pytest.raises(ImproperlyConfigured, match="MCPTASKS_DB_POOLER must be one of"):
        db_pooler()


def test_behind_pgbouncer_the_database_prepares_nothing_and_declares_no_cursor(monkeypatch):
    monkeypatch.delenv("DATABASE_POOL", raising=False)
    db = postgres_database(URL, "pgbouncer")
    assert db["OPTIONS"]["prepare_threshold"] is None  # also the pool's connections' kwargs
    assert db["OPTIONS"]["pool"]["max_size"] == 20
    assert db["DISABLE_SERVER_SIDE_CURSORS"] is True


def test_behind_pgbouncer_without_django_pool_still_prepares_nothing(monkeypatch):
    monkeypatch.setenv("DATABASE_POOL", "false")
    db = postgres_database(URL, "pgbouncer")
    assert db["OPTIONS"] == {"server_side_binding": True, "prepare_threshold": None}
    assert db["DISABLE_SERVER_SIDE_CURSORS"] is True


def test_without_a_pooler_values_are_bound_server_side_and_repeated_statements_prepared(
    monkeypatch,
):
    monkeypatch.delenv("DATABASE_POOL", raising=False)
    db = postgres_database(URL)
    assert db["OPTIONS"]["server_side_binding"] is True
    assert db["OPTIONS"]["prepare_threshold"] == PREPARE_THRESHOLD == 5
    assert set(db["OPTIONS"]) == {"server_side_binding", "prepare_threshold", "pool"}
    assert not db.get("DISABLE_SERVER_SIDE_CURSORS")


@pytest.mark.pg
def test_a_statement_run_often_on_a_connection_is_prepared_on_it(db):
    """Server-side binding and psycopg's threshold on the live connection (and its pool's):
    PostgreSQL keeps the statement's plan after PREPARE_THRESHOLD runs; before them it has none."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    if connection.settings_dict["OPTIONS"].get("prepare_threshold") is None:
        pytest.skip("behind a transaction pooler nothing is prepared (tested above)")
    statement = "SELECT count(*) FROM mcptasks_task WHERE tenant_id = %s"

    def prepared() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
                ["%FROM mcptasks_task WHERE tenant_id = $1%"],
            )
            return int(cursor.fetchone()[0])

    with connection.cursor() as cursor:
        for run in range(PREPARE_THRESHOLD + 1):
            if run == PREPARE_THRESHOLD - 1:
                assert prepared() == 0
            cursor.execute(statement, [run])
    assert prepared() == 1
