"""Tenants never wait on each other: each chain's head is its own row lock (PostgreSQL)."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest
from django.db import OperationalError, connection, transaction

from audit.models import AuditEvent, ChainHead
from audit.record import Actor, record
from tests.audit.threads import in_thread

pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


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

    holder, holder_outcome = in_thread(hold_acme_head)
    try:
        assert held.wait(10)
        writer, outcome = in_thread(lambda: _record_with_lock_timeout(globex))
        writer.join(10)
        assert not writer.is_alive() and "error" not in outcome, outcome
        assert outcome["result"] == 2
        # The control: a writer of acme does wait, so the lock really is held.
        blocked, blocked_outcome = in_thread(lambda: _record_with_lock_timeout(acme))
        blocked.join(10)
        assert isinstance(blocked_outcome.get("error"), OperationalError)
    finally:
        release.set()
        holder.join(10)
    assert "error" not in holder_outcome
    assert AuditEvent.objects.filter(chain="tenant:globex").count() == 2
    assert AuditEvent.objects.filter(chain="tenant:acme").count() == 1


def test_concurrent_writers_of_one_chain_never_fork_it(cast: dict[str, Any]) -> None:
    """Compare-and-set of the chain head (issue 23): writers that guess the head from what they
    last saw, racing on one tenant's chain, fall back to the locked read on a miss; the chain
    stays one unbroken line that verifies."""
    from audit import record as record_module
    from audit.chain import chain_for_tenant, verify_chain

    acme = cast["alice"]["tenant"]
    chain = chain_for_tenant(acme.slug)
    writers, events_each = 6, 15
    start = threading.Barrier(writers)

    def write() -> int:
        start.wait(10)
        for n in range(events_each):
            with transaction.atomic():
                record(
                    action="task.created",
                    actor=Actor.system("test"),
                    tenant_id=acme.pk,
                    tenant_slug=acme.slug,
                    data={"n": n},
                )
        return events_each

    stale = record_module._heads.get(chain)
    threads = [in_thread(write) for _ in range(writers)]
    for thread, _ in threads:
        thread.join(60)
    assert all(o.get("result") == events_each for _, o in threads), [o for _, o in threads]

    rows = list(
        AuditEvent.objects.filter(chain=chain).order_by("seq").values("seq", "prev_hash", "hash")
    )
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
    assert len(rows) >= writers * events_each
    for before, after in itertools.pairwise(rows):
        assert after["prev_hash"] == before["hash"]
    head = ChainHead.objects.get(chain=chain)
    assert (head.seq, head.hash) == (rows[-1]["seq"], rows[-1]["hash"])
    assert verify_chain(chain).broken is None
    assert stale is None or record_module._heads[chain] != stale


def test_a_stale_guess_of_the_head_falls_back_to_the_locked_read(cast: dict[str, Any]) -> None:
    from audit import record as record_module
    from audit.chain import chain_for_tenant, verify_chain

    acme = cast["alice"]["tenant"]
    chain = chain_for_tenant(acme.slug)

    def one() -> AuditEvent:
        return record(
            action="task.created",
            actor=Actor.system("test"),
            tenant_id=acme.pk,
            tenant_slug=acme.slug,
        )

    first = one()
    record_module._heads[chain] = (first.seq - 1, "f" * 64)  # another process moved the head
    second = one()
    assert (second.seq, second.prev_hash) == (first.seq + 1, first.hash)
    assert AuditEvent.objects.filter(chain=chain, seq=second.seq).count() == 1
    assert verify_chain(chain).broken is None
