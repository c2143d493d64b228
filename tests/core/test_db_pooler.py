"""``MCPTASKS_DB_POOLER``: behind PgBouncer in transaction mode no connection keeps a prepared
statement or a server-side cursor (tests/production/test_pgbouncer.py runs it through one)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from mcptasks.conf import db_pooler, postgres_database

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
    assert db["OPTIONS"] == {"prepare_threshold": None}
    assert db["DISABLE_SERVER_SIDE_CURSORS"] is True


def test_without_a_pooler_the_database_is_unchanged(monkeypatch):
    monkeypatch.delenv("DATABASE_POOL", raising=False)
    db = postgres_database(URL)
    assert set(db["OPTIONS"]) == {"pool"}
    assert not db.get("DISABLE_SERVER_SIDE_CURSORS")
