"""Fixtures of the fault tests (issue 5): real Celery workers and beat on the test database.

Every test here is marked ``live``, ``pg`` and ``redis`` and runs with
``django_db(transaction=True)``, so the worker processes see the rows the test commits. The
workers and beat get ``MCPTASKS_LEASE_S`` 3 and ``MCPTASKS_SWEEP_INTERVAL_S`` 0.5 (the test process
too), a var/ directory of their own, and Redis databases 13 (broker) and 14 (channel layer) of
the machine's Redis, flushed before and after — or a private redis-server for the outage test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.faults import checks, downstream, harness

BROKER_DB = 13
CHANNEL_DB = 14


@pytest.fixture
def fault_settings(settings: Any) -> Any:
    settings.MCPTASKS_LEASE_S = harness.LEASE_S
    settings.MCPTASKS_SWEEP_INTERVAL_S = harness.SWEEP_S
    # "not applied" waits for the dead attempt's lease plus this margin (decided in this process).
    settings.MCPTASKS_RECONCILE_MARGIN_S = harness.RECONCILE_MARGIN_S
    # The load tests start hundreds of tasks for one principal at once.
    settings.MCPTASKS_MAX_ACTIVE_TASKS_PER_PRINCIPAL = 100_000
    settings.MCPTASKS_MAX_ACTIVE_TASKS_PER_TENANT = 100_000
    return settings


@pytest.fixture
def fault_db(transactional_db: None) -> Iterator[psycopg.Connection[Any]]:
    """The fake downstream's tables in the test database (emptied); a connection to read them."""
    conn = psycopg.connect(downstream.conninfo(), autocommit=True, application_name="fault-test")
    downstream.install(conn)
    yield conn
    conn.close()
    downstream.close()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "var").mkdir()
    return tmp_path


class ClusterFactory:
    """``make_cluster(broker_url, channel_url)`` → a new :class:`harness.Cluster` of this test."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.clusters: list[harness.Cluster] = []

    def __call__(self, broker_url: str, channel_url: str) -> harness.Cluster:
        from django.conf import settings
        from django.db import connection

        cluster = harness.Cluster(
            database_url=harness.database_url(connection.settings_dict),
            broker_url=broker_url,
            channel_url=channel_url,
            workdir=self.workdir,
            tool_packs=list(settings.MCPTASKS_TOOL_PACKS),
        )
        self.clusters.append(cluster)
        return cluster

    def stop_all(self) -> None:
        for cluster in self.clusters:
            cluster.stop_all()


@pytest.fixture
def make_cluster(
    transactional_db: None, fault_settings: Any, fault_db: Any, workdir: Path
) -> Iterator[ClusterFactory]:
    """Workers and beat of this test, all ended (by pid) before the test database is flushed."""
    factory = ClusterFactory(workdir)
    yield factory
    factory.stop_all()


@pytest.fixture
def shared_broker() -> Iterator[tuple[str, str]]:
    """Databases 13 and 14 of the machine's Redis, flushed; this process dispatches there."""
    from django.conf import settings

    broker = harness.redis_db_url(settings.REDIS_URL, BROKER_DB)
    channel = harness.redis_db_url(settings.REDIS_URL, CHANNEL_DB)
    for url in (broker, channel):
        harness.flush_redis(url)
    with harness.producer_broker(broker):
        yield broker, channel
    for url in (broker, channel):
        harness.flush_redis(url)


@pytest.fixture
def cluster(make_cluster: ClusterFactory, shared_broker: tuple[str, str]) -> harness.Cluster:
    return make_cluster(*shared_broker)


@pytest.fixture
def private_redis(workdir: Path) -> Iterator[harness.PrivateRedis]:
    """A redis-server of this test's own on a free port; this process dispatches there."""
    server = harness.PrivateRedis(workdir)
    server.start()
    try:
        with harness.producer_broker(server.url(0)):
            yield server
    finally:
        server.stop()


@pytest.fixture
def fault_tasks(cast: dict[str, dict[str, Any]]) -> harness.FaultTasks:
    return harness.FaultTasks(cast)


@pytest.fixture
def write_log(
    fault_db: psycopg.Connection[Any], make_cluster: ClusterFactory
) -> Iterator[psycopg.Connection[Any]]:
    """Triggers that log every accepted write to the task tables with its backend pid (removed
    once the workers are gone: a stopped worker may hold a lock the DROP would wait for)."""
    checks.install_write_log(fault_db)
    yield fault_db
    make_cluster.stop_all()
    checks.remove_write_log(fault_db)
