"""Fixtures of the effect tests (issue 6).

Every test here gets the demo's fake cloud in a JSON file of its own (``MCPTASKS_FAKE_CLOUD``,
inherited by the worker processes). The crash tests run real Celery workers and beat against the
test database (tests/faults/harness.py) on Redis databases 1 (broker) and 2 (channel layer and
rate limits) of the machine's Redis, flushed before and after.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mcptasks.runner import run_task
from tests.faults import conftest as fault_fixtures
from tests.faults import harness
from tests.protocol import conftest as protocol_fixtures

BROKER_DB = 1
CHANNEL_DB = 2

# The fault tests' settings (lease 3 s, sweep 0.5 s) and private var/ directory.
fault_settings = fault_fixtures.fault_settings
workdir = fault_fixtures.workdir
# MCP clients over the real ASGI application.
mcp_for = protocol_fixtures.mcp_for


@pytest.fixture(autouse=True)
def fake_cloud_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "fake_cloud.json"
    monkeypatch.setenv("MCPTASKS_FAKE_CLOUD", str(path))
    return path


@pytest.fixture(autouse=True)
def plain_http(settings: Any) -> None:
    """Requests come over plain HTTP: with DATABASE_URL set the settings are the production
    ones, whose HTTPS redirect would answer every request with a 301."""
    settings.SECURE_SSL_REDIRECT = False


@pytest.fixture
def effects_broker() -> Iterator[tuple[str, str]]:
    """Databases 1 and 2 of the machine's Redis, flushed; this process dispatches to 1."""
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
def cluster(
    transactional_db: None,
    fault_settings: Any,
    workdir: Path,
    fake_cloud_file: Path,
    effects_broker: tuple[str, str],
) -> Iterator[harness.Cluster]:
    """Workers and beat of this test (none started yet), all ended by pid before the test
    database is flushed."""
    from django.conf import settings
    from django.db import connection

    broker, channel = effects_broker
    cluster = harness.Cluster(
        database_url=harness.database_url(connection.settings_dict),
        broker_url=broker,
        channel_url=channel,
        workdir=workdir,
        tool_packs=list(settings.MCPTASKS_TOOL_PACKS),
        extra_env={
            "MCPTASKS_FAKE_CLOUD": str(fake_cloud_file),
            "MCPTASKS_LIMITS_REDIS_URL": channel,
        },
    )
    yield cluster
    cluster.stop_all()


@pytest.fixture
def olga_actor(users: dict[str, Any]) -> Any:
    from audit.record import Actor

    return Actor.for_user(users["olga"], kind="operator")


@pytest.fixture
def audit_of() -> Callable[..., list[tuple[str, str, dict[str, Any]]]]:
    """``audit_of(task_id, *actions)`` → ``(action, actor, data)`` of the task's audit events
    (those of ``actions`` only, if given), oldest first."""
    from audit.models import AuditEvent

    def events(task_id: str, *actions: str) -> list[tuple[str, str, dict[str, Any]]]:
        rows = AuditEvent.objects.filter(task_id=task_id).order_by("seq")
        if actions:
            rows = rows.filter(action__in=actions)
        return list(rows.values_list("action", "actor_display", "data"))

    return events


PRODUCTION_DEPLOY = {"service": "billing", "version": "1.4.2", "environment": "production"}


@pytest.fixture
def start(run_jobs: Any, mcp_for: Callable[[str], Any]) -> Callable[..., str]:
    """``start()`` → the id of alice's ``deploy_service`` task, run until it waits for its
    approval (jobs go to the in-process queue, which nothing drains: run_task runs them)."""

    def start_task(
        tool: str = "deploy_service", arguments: dict[str, Any] | None = None, owner: str = "alice"
    ) -> str:
        reply = mcp_for(owner).tool(tool, PRODUCTION_DEPLOY if arguments is None else arguments)
        assert reply.result["resultType"] == "task", reply.body
        task_id: str = reply.result["taskId"]
        assert run_task(task_id) in ("awaiting_operator", "awaiting_input")
        return task_id

    return start_task
