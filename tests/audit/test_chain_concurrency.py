"""Tenants never wait on each other: each chain's head is its own row lock (PostgreSQL)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import OperationalError, connection, transaction

from audit.models import AuditEvent, ChainHead
from audit.record import Actor, record

pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


def _in_thread(target: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = target()
        except Exception as exc:
            outcome["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def _record_with_lock_timeout(tenant: Any) -> int:
    """Record one event, giving up (OperationalError) if a lock is not granted within 2 s."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '2s'")
        return record(
            action="task.created",
            actor=Actor.system("test"),
            tenant_id=tenant.pk,
            tenant_slug=tenant.slug,
            data={"probe": True},
        ).seq


def test_a_writer_of_globex_does_not_wait_for_a_transaction_holding_acmes_head(
    cast: dict[str, Any],
) -> None:
    acme, globex = cast["alice"]["tenant"], cast["bob"]["tenant"]
    for tenant in (acme, globex):
        record(
            action="task.created",
            actor=Actor.system("test"),
            tenant_id=tenant.pk,
            tenant_slug=tenant.slug,
        )
    held, release = threading.Event(), threading.Event()

    def hold_acme_head() -> None:
        with transaction.atomic():
            ChainHead.objects.select_for_update().get(chain="tenant:acme")
            held.set()
            release.wait(30)

    holder, holder_outcome = _in_thread(hold_acme_head)
    try:
        assert held.wait(10)
        writer, outcome = _in_thread(lambda: _record_with_lock_timeout(globex))
        writer.join(10)
        assert not writer.is_alive() and "error" not in outcome, outcome
        assert outcome["result"] == 2
        # The control: a writer of acme does wait, so the lock really is held.
        blocked, blocked_outcome = _in_thread(lambda: _record_with_lock_timeout(acme))
        blocked.join(10)
        assert isinstance(blocked_outcome.get("error"), OperationalError)
    finally:
        release.set()
        holder.join(10)
    assert "error" not in holder_outcome
    assert AuditEvent.objects.filter(chain="tenant:globex").count() == 2
    assert AuditEvent.objects.filter(chain="tenant:acme").count() == 1
