"""Audit events sealed after commit in batches (audit/seal.py, MCPTASKS_AUDIT_SEAL_DELAY_MS > 0).

The general suite seals inline (tests/conftest.py); these tests switch the batched mode on.
Rows of a test's own (uncommitted) transaction are never seen by the sealer thread, and
on_commit never fires there: the tests call the sealer themselves, but for the thread's own
test (a transactional one, PostgreSQL).
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction
from django.test import Client
from django.utils import timezone

from audit import seal
from audit.chain import HASH_MISMATCH, PREV_HASH_MISMATCH, SEQ_GAP, verify_chain
from audit.export import ExportFilters, ExportStream
from audit.models import AuditEvent, ChainHead
from audit.record import Actor, record
from mcptasks import sweeps
from tests.audit.threads import in_thread

ACME = "tenant:acme"


@pytest.fixture
def batched(settings: Any) -> Iterator[None]:
    settings.MCPTASKS_AUDIT_SEAL_DELAY_MS = 50
    yield


def _record(tenant: Any, index: int = 0, **kwargs: Any) -> AuditEvent:
    return record(
        action="task.created",
        actor=Actor.system("test"),
        tenant_id=tenant.pk,
        tenant_slug=tenant.slug,
        task_id=f"task-{index}",
        data={"index": index},
        **kwargs,
    )


def _verify_audit(*args: str) -> tuple[bool, str]:
    out = io.StringIO()
    try:
        call_command("verify_audit", *args, stdout=out)
    except CommandError as exc:
        return False, out.getvalue() + str(exc)
    return True, out.getvalue()


# ---------------------------------------------------------------- writer and sealer
def test_batched_record_inserts_the_event_unsealed_and_touches_no_chain_head(
    cast: dict[str, Any], batched: None, django_assert_num_queries: Any
) -> None:
    acme = cast["alice"]["tenant"]
    with django_assert_num_queries(1):  # the INSERT, nothing else
        event = _record(acme)
    stored = AuditEvent.objects.get(pk=event.pk)
    assert (stored.seq, stored.prev_hash, stored.hash) == (None, None, None)
    assert not ChainHead.objects.filter(chain=ACME).exists()


def test_the_sealer_links_unsealed_events_gap_free_and_verify_is_clean(
    cast: dict[str, Any], batched: None
) -> None:
    acme = cast["alice"]["tenant"]
    events = [_record(acme, index) for index in range(5)]
    assert seal.pending_chains() == [ACME]
    assert seal.seal_pending() == 5
    sealed = list(AuditEvent.objects.filter(chain=ACME).order_by("seq"))
    assert [e.seq for e in sealed] == [1, 2, 3, 4, 5]
    assert [e.pk for e in sealed] == [e.pk for e in events]  # id order
    report = verify_chain(ACME)
    assert report.ok and report.events == 5 and report.unsealed == 0
    assert ChainHead.objects.get(chain=ACME).seq == 5
    assert seal.seal_pending() == 0


def test_inline_and_batched_events_share_one_gap_free_chain(
    cast: dict[str, Any], batched: None
) -> None:
    acme = cast["alice"]["tenant"]
    _record(acme, 0)
    inline = _record(acme, 1, inline=True)
    assert inline.seq == 1  # the unsealed one before it is sealed after it
    _record(acme, 2)
    seal.seal_pending()
    assert sorted(AuditEvent.objects.filter(chain=ACME).values_list("seq", flat=True)) == [1, 2, 3]
    assert verify_chain(ACME).ok


def test_a_batch_larger_than_one_seal_is_sealed_in_several(
    cast: dict[str, Any], batched: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(seal, "BATCH", 3)
    acme = cast["alice"]["tenant"]
    for index in range(7):
        _record(acme, index)
    assert seal.seal_chain(ACME, limit=3) == 3
    assert verify_chain(ACME).unsealed == 4
    assert seal.seal_pending() == 4
    assert verify_chain(ACME).ok and verify_chain(ACME).events == 7


@pytest.mark.parametrize("tampering", ["edit", "delete", "reorder"])
def test_tampering_with_a_sealed_event_is_detected(
    cast: dict[str, Any], batched: None, tamper: Callable[[], Any], tampering: str
) -> None:
    acme = cast["alice"]["tenant"]
    for index in range(6):
        _record(acme, index)
    seal.seal_pending()
    with tamper():
        if tampering == "edit":
            AuditEvent.objects.filter(chain=ACME, seq=3).update(action="task.cancelled")
        elif tampering == "delete":
            AuditEvent.objects.filter(chain=ACME, seq=3).delete()
        else:
            AuditEvent.objects.filter(chain=ACME, seq=3).update(seq=-3)
            AuditEvent.objects.filter(chain=ACME, seq=4).update(seq=3)
            AuditEvent.objects.filter(chain=ACME, seq=-3).update(seq=4)
    broken = verify_chain(ACME).broken
    expected = {"edit": HASH_MISMATCH, "delete": SEQ_GAP, "reorder": PREV_HASH_MISMATCH}
    assert broken is not None and (broken.seq, broken.kind) == (3, expected[tampering])


# ---------------------------------------------------------------- the unsealed tail
def test_an_unsealed_tail_is_reported_and_fails_verify_audit_only_past_the_bound(
    cast: dict[str, Any], batched: None
) -> None:
    acme = cast["alice"]["tenant"]
    _record(acme, 0)
    seal.seal_pending()
    _record(acme, 1)
    report = verify_chain(ACME)
    assert report.ok and (report.events, report.unsealed) == (1, 1)
    ok, output = _verify_audit("--chain", ACME)
    assert ok and "sealing tenant:acme: 1 unsealed event(s)" in output
    # An event its process recorded long ago and never sealed (the sweep did not run either).
    AuditEvent.objects.create(
        chain=ACME,
        tenant_id=acme.pk,
        actor_kind="system",
        action="task.created",
        created_at=timezone.now() - timedelta(seconds=seal.seal_bound_s() + 5),
    )
    assert verify_chain(ACME).late(seal.seal_bound_s())
    ok, output = _verify_audit("--chain", ACME)
    assert not ok
    assert "LATE    tenant:acme: 2 unsealed event(s)" in output
    assert "1 chain(s) with events unsealed past the bound" in output
    seal.seal_pending()
    ok, output = _verify_audit("--chain", ACME)
    assert ok and "unsealed" not in output


def test_a_crash_between_insert_and_seal_is_sealed_by_the_sweep_backstop(
    cast: dict[str, Any], batched: None
) -> None:
    """The events' commit happened (the test's transaction stands for it) and their process
    died before its sealer ran (on_commit never fires here): the sweep seals them all."""
    acme, globex = cast["alice"]["tenant"], cast["bob"]["tenant"]
    ids = [_record(acme, 0).pk, _record(globex, 1).pk, _record(acme, 2).pk]
    assert sweeps.run_all()["audit_sealed"] == 3
    assert not AuditEvent.objects.filter(pk__in=ids, seq__isnull=True).exists()
    assert verify_chain(ACME).ok and verify_chain("tenant:globex").ok


def test_retention_seals_the_chain_before_it_purges(
    cast: dict[str, Any], batched: None, tamper: Callable[[], Any]
) -> None:
    from audit.retention import purge_tenant

    acme = cast["alice"]["tenant"]
    for index in range(3):
        _record(acme, index)
    with tamper():  # recorded ten days ago, and still unsealed
        AuditEvent.objects.filter(chain=ACME).update(created_at=timezone.now() - timedelta(days=10))
    result = purge_tenant(tenant_slug="acme", older_than_days=5, actor=Actor.system("test"))
    assert (result.purged, result.checkpoint_seq, result.event_seq) == (3, 3, 4)
    assert verify_chain(ACME).ok


# ---------------------------------------------------------------- readers
def test_an_export_holds_sealed_events_only(cast: dict[str, Any], batched: None) -> None:
    acme = cast["alice"]["tenant"]
    for index in range(3):
        _record(acme, index)
    seal.seal_pending()
    _record(acme, 3)  # not sealed yet
    stream = ExportStream(filters=ExportFilters(chain=ACME), format="jsonl")
    lines = b"".join(stream).decode().splitlines()
    assert len(lines) == 3 and stream.count == 3
    assert stream.heads[ACME]["seq"] == 3


def test_the_audit_stream_takes_sealed_events_only(cast: dict[str, Any], batched: None) -> None:
    from mcptasks.outbox.models import Destination
    from mcptasks.outbox.subscriptions import AUDIT
    from mcptasks.outbox.writer import take_audit_batch

    acme = cast["alice"]["tenant"]
    destination = Destination.objects.create(
        tenant=acme,
        name="siem",
        kind="webhook",
        config={"url": "https://siem.example/in"},
        events=[AUDIT],
        owner=cast["amy"]["user"],
    )
    _record(acme, 0)
    assert take_audit_batch(destination.pk, 100) is None  # nothing sealed yet
    seal.seal_pending()
    _record(acme, 1)
    delivery = take_audit_batch(destination.pk, 100)
    assert delivery is not None and (delivery.first_seq, delivery.last_seq) == (1, 1)


def test_a_seal_wakes_the_tenants_audit_streams(
    cast: dict[str, Any],
    batched: None,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    from mcptasks import events
    from mcptasks.outbox.models import Destination
    from mcptasks.outbox.subscriptions import AUDIT

    acme = cast["alice"]["tenant"]
    destination = Destination.objects.create(
        tenant=acme,
        name="siem",
        kind="webhook",
        config={"url": "https://siem.example/in"},
        events=[AUDIT],
        owner=cast["amy"]["user"],
    )
    _record(acme, 0)
    jobs: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(
        events, "dispatch_job", lambda name, payload, **kw: jobs.append((name, payload))
    )
    with django_capture_on_commit_callbacks(execute=True):
        seal.seal_pending()
    assert jobs == [("stream_audit", {"destination_id": destination.pk})]


def test_the_dashboard_lists_an_unsealed_event_as_sealing_without_a_link(
    cast: dict[str, Any], batched: None
) -> None:
    acme = cast["alice"]["tenant"]
    _record(acme, 0)
    seal.seal_pending()
    unsealed = _record(acme, 1)
    client = Client()
    client.force_login(cast["amy"]["user"])
    response = client.get("/audit/?tenant=acme")
    assert response.status_code == 200
    html = response.content.decode()
    row = html.split(f'data-event-id="{unsealed.pk}"')[1].split("</tr>")[0]
    assert "sealing" in row and 'href="/audit/tenant:acme/' not in row
    assert "/audit/tenant:acme/1" in html  # the sealed one keeps its address
    verify = client.post("/audit/verify", {"chain": ACME})
    verdict = verify.content.decode().split('data-chain="tenant:acme"')[1].split("</tr>")[0]
    assert verify.status_code == 200 and " sealing</span>" in verdict, verdict


def test_a_task_page_shows_its_unsealed_event_as_sealing_without_a_link(
    cast: dict[str, Any], batched: None, make_task: Callable[..., Any]
) -> None:
    task = make_task()
    assert AuditEvent.objects.get(task_id=task.pk, action="task.created").seq is None
    client = Client()
    client.force_login(cast["amy"]["user"])  # an admin of acme: the timeline links to audit
    response = client.get(f"/tasks/{task.pk}/")
    assert response.status_code == 200
    timeline = response.content.decode().split('id="sec-timeline"')[1].split("</section>")[0]
    assert "sealing" in timeline and "/audit/tenant:acme/" not in timeline
    seal.seal_pending()
    sealed = client.get(f"/tasks/{task.pk}/").content.decode()
    assert 'href="/audit/tenant:acme/1/"' in sealed or "/audit/tenant:acme/1" in sealed


def test_the_audit_api_shows_an_unsealed_event_with_null_chain_fields(
    cast: dict[str, Any], batched: None
) -> None:
    acme = cast["alice"]["tenant"]
    _record(acme, 0)
    client = Client()
    client.force_login(cast["amy"]["user"])
    response = client.get("/api/v1/audit/events?tenant=acme")
    assert response.status_code == 200, response.content
    body = response.json()
    rows = body["results"] if isinstance(body, dict) else body
    assert rows[0]["seq"] is None and rows[0]["hash"] is None


# ---------------------------------------------------------------- PostgreSQL
@pytest.fixture
def no_sealer_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test's own sealers only (on_commit fires in transactional tests)."""
    monkeypatch.setattr(seal._sealer, "wake", lambda chain: None)


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_two_open_transactions_of_one_tenant_both_insert_events_without_waiting(
    cast: dict[str, Any], batched: None, no_sealer_thread: None
) -> None:
    acme = cast["alice"]["tenant"]
    _record(acme, 0, inline=True)  # the chain and its head exist, as in a running server
    inserted, release = threading.Event(), threading.Event()

    def open_transaction() -> int:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '2s'")
            pk = _record(acme, 1).pk
            inserted.set()
            release.wait(30)
            return pk

    first, first_outcome = in_thread(open_transaction)
    try:
        assert inserted.wait(10)
        second, second_outcome = in_thread(lambda: _record_in_transaction(acme))
        second.join(10)
        assert not second.is_alive() and "error" not in second_outcome, second_outcome
    finally:
        release.set()
        first.join(10)
    assert "error" not in first_outcome, first_outcome
    seal.seal_pending()
    report = verify_chain(ACME)
    assert report.ok and report.events == 3


def _record_in_transaction(tenant: Any) -> int:
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '2s'")
        return _record(tenant, 2).pk


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_two_sealers_at_once_never_fork_a_chain(
    cast: dict[str, Any], batched: None, no_sealer_thread: None
) -> None:
    acme = cast["alice"]["tenant"]
    for index in range(120):
        _record(acme, index)
    go = threading.Barrier(2)

    def sealer() -> int:
        go.wait(10)
        total = 0
        while AuditEvent.objects.filter(chain=ACME, seq__isnull=True).exists():
            total += seal.seal_chain(ACME, limit=7) or 0
        return total

    threads = [in_thread(sealer) for _ in range(2)]
    for thread, _ in threads:
        thread.join(60)
    outcomes = [outcome for _, outcome in threads]
    assert all("error" not in outcome for outcome in outcomes), outcomes
    assert sum(outcome["result"] for outcome in outcomes) == 120
    seqs = list(AuditEvent.objects.filter(chain=ACME).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, 121))
    assert verify_chain(ACME).ok


@pytest.mark.pg
def test_the_trigger_lets_only_the_seal_update_an_event(
    cast: dict[str, Any], batched: None
) -> None:
    acme = cast["alice"]["tenant"]
    sealed = _record(acme, 0, inline=True)
    unsealed = _record(acme, 1)

    def refused(sql: str, params: list[Any]) -> bool:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT set_config('mcptasks.audit_seal', 'on', true)")
                cursor.execute(sql, params)
        except DatabaseError as exc:
            return "append-only" in str(exc)
        return False

    table = "audit_auditevent"
    # A sealed event: no UPDATE at all, not even of its chain columns.
    assert refused(f"UPDATE {table} SET hash = %s WHERE id = %s", ["f" * 64, sealed.pk])
    assert refused(f"UPDATE {table} SET action = 'x' WHERE id = %s", [sealed.pk])
    # An unsealed event: a seal that also changes content, or a partial seal, is refused.
    assert refused(
        f"UPDATE {table} SET seq = 2, prev_hash = %s, hash = %s, action = 'x' WHERE id = %s",
        [sealed.hash, "a" * 64, unsealed.pk],
    )
    assert refused(f"UPDATE {table} SET seq = 2 WHERE id = %s", [unsealed.pk])
    assert refused(f"UPDATE {table} SET data = '{{}}' WHERE id = %s", [unsealed.pk])
    # Without the sealer's setting even a well-formed seal is refused.
    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(
            f"UPDATE {table} SET seq = 2, prev_hash = %s, hash = %s WHERE id = %s",
            [sealed.hash, "a" * 64, unsealed.pk],
        )
    # The sealer's seal passes, once.
    assert seal.seal_chain(ACME) == 1
    assert verify_chain(ACME).ok
    assert refused(f"UPDATE {table} SET hash = %s WHERE id = %s", ["f" * 64, unsealed.pk])


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_the_sealer_thread_seals_committed_events_within_the_delay(
    cast: dict[str, Any], batched: None
) -> None:
    acme = cast["alice"]["tenant"]
    with transaction.atomic():
        pk = _record(acme, 0).pk
    committed = time.monotonic()
    deadline = committed + 10
    while AuditEvent.objects.filter(pk=pk, seq__isnull=True).exists():
        assert time.monotonic() < deadline, "the sealer thread did not seal the event"
        time.sleep(0.01)
    waited = time.monotonic() - committed
    assert waited >= 0.04  # it waited out the delay (50 ms) to coalesce wake-ups ...
    assert waited < 2.0  # ... and sealed soon after it
    assert verify_chain(ACME).ok
    threads = [t for t in threading.enumerate() if t.name == "mcptasks-audit-sealer"]
    assert len(threads) == 1 and threads[0].daemon


@pytest.mark.pg
@pytest.mark.django_db
def test_the_seal_function_reads_its_chain_by_index_whatever_the_estimates() -> None:
    """Migration 0010: planned without its values, the seal's duplicate-seq check looked like
    a sixth of the table and ran as a sequential scan of every event (1.1 s a seal at ten
    million events); with sequential scans and JIT off it is one index probe per partition."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT proconfig FROM pg_proc WHERE proname = 'audit_seal_events'"
            " AND pronamespace = 'public'::regnamespace"
        )
        [(config,)] = cursor.fetchall()
    assert {"enable_seqscan=off", "jit=off"} <= set(config), config
