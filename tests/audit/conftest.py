"""Fixtures of the audit tests: events recorded through the one writer, and raw tampering."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection

from audit.models import AuditEvent
from audit.record import Actor, record
from audit.seal import seal_pending

TABLES = ("audit_auditevent", "audit_retentioncheckpoint")


@pytest.fixture(autouse=True)
def fresh_limits() -> Iterator[None]:
    """Failed logins are counted per window (audit/auth_events.py): each test starts at zero."""
    from mcptasks import limits

    limits.buckets.cache_clear()
    limits.buckets().reset()
    yield
    limits.buckets().reset()


@pytest.fixture(params=["inline", "batched"])
def record_events(
    request: pytest.FixtureRequest, cast: dict[str, dict[str, Any]], settings: Any
) -> Callable[..., list[AuditEvent]]:
    """Record ``count`` events in a tenant's chain (or ``system`` with tenant=None).

    Twice: sealed inline, and ``batched`` — recorded unsealed (MCPTASKS_AUDIT_SEAL_DELAY_MS > 0)
    and then sealed by audit/seal.py, as a reader would find them once sealed — so every test
    of chains, verification, exports, digests and retention built on it also checks chains the
    sealer built. Events the test records itself afterwards are sealed inline."""
    batched = request.param == "batched"

    def make(
        count: int,
        tenant: str | None = "acme",
        action: str = "task.created",
        actor: str = "alice",
        task_id: str = "",
    ) -> list[AuditEvent]:
        settings.MCPTASKS_AUDIT_SEAL_DELAY_MS = 50 if batched else 0
        try:
            events = _record_events(count, tenant, action, actor, task_id)
        finally:
            settings.MCPTASKS_AUDIT_SEAL_DELAY_MS = 0
        if not batched:
            return events
        assert all(event.seq is None for event in events)
        # In a transactional test this process's sealer thread may hold a chain a moment
        # (SKIP LOCKED skips it here): seal until every event is.
        deadline = time.monotonic() + 10
        while True:
            seal_pending()
            fresh = list(AuditEvent.objects.filter(pk__in=[e.pk for e in events]).order_by("pk"))
            if all(e.seq is not None for e in fresh) or time.monotonic() > deadline:
                return fresh
            time.sleep(0.01)

    def _record_events(
        count: int,
        tenant: str | None,
        action: str,
        actor: str,
        task_id: str,
    ) -> list[AuditEvent]:
        tenant_row = next(
            (
                entry["tenant"]
                for entry in cast.values()
                if tenant and entry["tenant"].slug == tenant
            ),
            None,
        )
        who = Actor.for_user(cast[actor]["user"], kind="principal")
        return [
            record(
                action=action,
                actor=who,
                tenant_id=tenant_row.pk if tenant_row else None,
                tenant_slug=tenant_row.slug if tenant_row else None,
                task_id=task_id or f"task-{index}",
                data={"index": index, "note": f"event {index}", "ratio": index / 3},
            )
            for index in range(count)
        ]

    return make


@contextmanager
def _triggers_off() -> Iterator[None]:
    """Let the test UPDATE and DELETE audit rows directly, as an attacker with DB access would.

    PostgreSQL: the append-only triggers are disabled inside the test's transaction (the test
    database rolls that back). SQLite has no trigger."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            for table in TABLES:
                cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
    try:
        yield
    finally:
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                for table in TABLES:
                    cursor.execute(f"ALTER TABLE {table} ENABLE TRIGGER USER")


@pytest.fixture
def tamper() -> Callable[[], Any]:
    return _triggers_off
