"""The fixed cast (STYLE rule 16), service markers, and factories."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest


def pytest_configure(config: pytest.Config) -> None:
    from django.conf import settings

    # Fast test settings: a cheap password hasher (the cast's logins are not what is tested).
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # The test client speaks plain HTTP; TLS ends at the proxy in production (its redirect is
    # covered by tests/production/test_deploy_check.py).
    settings.SECURE_SSL_REDIRECT = False
    # In-process requests (httpx ASGITransport) each run on a new event loop, where the fast
    # tasks/get path's per-process async pool cannot live; server processes (live tests,
    # tests/protocol/test_fast_get.py) use it.
    settings.MCPTASKS_FAST_TASKS_GET = False
    # The general suite reads an event's seq and hash right after the action that recorded it:
    # audit events are sealed inline here and in the servers it starts. The batched sealer
    # (audit/seal.py, the PostgreSQL default) has its own tests: tests/audit/test_seal*.py.
    os.environ.setdefault("MCPTASKS_AUDIT_SEAL_DELAY_MS", "0")
    settings.MCPTASKS_AUDIT_SEAL_DELAY_MS = int(os.environ["MCPTASKS_AUDIT_SEAL_DELAY_MS"])
    # The general suite purges a task at its TTL plus the grace, row by row, as SQLite does: the
    # whole-day partition purge (mcptasks/task_partitions.py, the PostgreSQL default) waits for
    # the day to end and has its own tests, tests/tasks/test_task_partitions.py.
    os.environ.setdefault("MCPTASKS_TASK_PARTITION_PURGE", "0")
    settings.MCPTASKS_TASK_PARTITION_PURGE = os.environ["MCPTASKS_TASK_PARTITION_PURGE"] == "1"
    # The general suite reads /metrics right after the transitions it makes: the ended tasks
    # are counted at every scrape, here and in the servers it starts. Their counts kept for
    # MCPTASKS_METRICS_ENDED_COUNT_S (the default) have their own tests:
    # tests/production/test_metrics_ended_counts.py.
    os.environ.setdefault("MCPTASKS_METRICS_ENDED_COUNT_S", "0")
    settings.MCPTASKS_METRICS_ENDED_COUNT_S = int(os.environ["MCPTASKS_METRICS_ENDED_COUNT_S"])
    # Tests run jobs themselves (embedded.drain, runner.run_task): the application must not
    # start the embedded default's worker threads on its first request.
    from mcptasks import embedded

    embedded.decline()
    # The tests' own tools (tests/toolpack.py) beside the shipped packs.
    if "tests.toolpack" not in settings.MCPTASKS_TOOL_PACKS:
        settings.MCPTASKS_TOOL_PACKS = [*settings.MCPTASKS_TOOL_PACKS, "tests.toolpack"]


def _available(name: str) -> str | None:
    """None if the service a marker needs is available, else why not."""
    if name == "pg":
        return None if os.environ.get("DATABASE_URL") else "DATABASE_URL is not set"
    if name == "redis":
        return None if os.environ.get("REDIS_URL") else "REDIS_URL is not set"
    if name == "live":
        return (
            None
            if os.environ.get("MCPTASKS_LIVE_TESTS") == "1"
            else "MCPTASKS_LIVE_TESTS=1 is not set"
        )
    if name == "browser":
        if os.environ.get("MCPTASKS_BROWSER_TESTS") != "1":
            return "MCPTASKS_BROWSER_TESTS=1 is not set"
        return None if shutil.which("chromium") else "chromium is not installed"
    if name == "pgbouncer":
        return None if shutil.which("pgbouncer") else "the pgbouncer binary is not installed"
    if name == "conformance":
        return (
            None
            if os.environ.get("MCPTASKS_CONFORMANCE_TESTS") == "1"
            else "MCPTASKS_CONFORMANCE_TESTS=1 is not set"
        )
    return None


SERVICE_MARKERS = ("pg", "redis", "live", "browser", "pgbouncer", "conformance")


def pytest_runtest_setup(item: pytest.Item) -> None:
    required = {m.strip() for m in os.environ.get("MCPTASKS_REQUIRE_MARKERS", "").split(",")}
    for name in SERVICE_MARKERS:
        if item.get_closest_marker(name) is None:
            continue
        reason = _available(name)
        if reason is None:
            continue
        if name in required:
            pytest.fail(f"CI requires the {name!r} tests to run, but {reason}", pytrace=False)
        pytest.skip(f"needs {name}: {reason}")


@pytest.fixture
def sealed_later(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Audit events inserted unsealed and sealed after commit (the PostgreSQL default), with
    the outbox's subscriptions read afresh. The process's sealer thread is not woken (a test
    seals with ``audit.seal.seal_pending``): in a transactional test it would seal while the
    test's teardown truncates the tables, and the two deadlock."""
    from audit import seal
    from mcptasks.outbox import subscriptions

    monkeypatch.setattr(seal._sealer, "wake", lambda chain: None)
    settings.MCPTASKS_AUDIT_SEAL_DELAY_MS = 50
    subscriptions.forget()
    yield
    subscriptions.forget()


@pytest.fixture
def subscribe(cast: dict[str, dict[str, Any]]) -> Callable[..., Any]:
    """``subscribe(tenant, events)``: a webhook destination of the tenant, amy's, for
    ``events``; the outbox's subscriptions then read afresh."""
    from mcptasks.outbox import subscriptions
    from mcptasks.outbox.models import Destination

    def make(tenant: Any, events: list[str]) -> Any:
        destination = Destination.objects.create(
            tenant=tenant,
            name="hooks",
            kind="webhook",
            config={"url": "https://hooks.example/in"},
            events=events,
            owner=cast["amy"]["user"],
        )
        subscriptions.forget()
        return destination

    return make


@pytest.fixture
def cast(db: Any) -> dict[str, dict[str, Any]]:
    """alice, adam (acme members), amy (acme admin), bob (globex member), olga (operator for
    acme and globex), carl (auditor for acme and globex) — each with a token."""
    from mcptasks.management.commands.seed_demo import seed_cast

    return seed_cast()


@pytest.fixture
def users(cast: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {name: entry["user"] for name, entry in cast.items()}


@pytest.fixture
def make_task(cast: dict[str, dict[str, Any]], settings: Any) -> Callable[..., Any]:
    """Create a task through lifecycle for a cast member; returns the Task.

    Tests build scenes of many running tasks of one principal by claiming them directly: the
    fair-share caps on running tasks are off for them (tests/limits/test_fair_share.py sets
    them, and the worker processes of tests/faults run with the defaults)."""
    from audit.record import Actor
    from mcptasks import lifecycle

    settings.MCPTASKS_MAX_RUNNING_TASKS_PER_TENANT = 0
    settings.MCPTASKS_MAX_RUNNING_TASKS_PER_PRINCIPAL = 0

    def make(
        owner: str = "alice",
        tool_name: str = "echo_task",
        arguments: dict[str, Any] | None = None,
        **options: Any,
    ) -> Any:
        entry = cast[owner]
        task, _ = lifecycle.task_create(
            spec=lifecycle.NewTask(
                tenant_id=entry["tenant"].pk,
                principal_id=entry["user"].pk,
                tool_name=tool_name,
                arguments=arguments or {},
                policy_revision="test",
                ttl_ms=options.pop("ttl_ms", 60_000),
                client_capabilities=options.pop(
                    "client_capabilities",
                    {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}},
                ),
                **options,
            ),
            actor=Actor.for_user(entry["user"], kind="principal"),
        )
        return task

    return make


@pytest.fixture
def run_jobs(settings: Any) -> Iterator[Callable[[], int]]:
    """Run the jobs queued for the in-process worker, in this thread; returns how many ran.

    The test's jobs go to the in-process queue even when REDIS_URL is set (Celery delivery is
    tested with real worker processes in tests/faults and tests/streams)."""
    from mcptasks import embedded

    settings.MCPTASKS_EMBEDDED_WORKER = True
    embedded.clear()
    yield embedded.drain
    embedded.clear()
