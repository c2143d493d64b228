"""verify_audit proves chains intact and names the first broken event of a tampered one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db.models import F

from audit.chain import (
    HASH_MISMATCH,
    HEAD_MISMATCH,
    PREV_HASH_MISMATCH,
    SEQ_GAP,
    body_of_row,
    link_hash,
    verify_chain,
    verify_chains,
)
from audit.models import AuditEvent, ChainHead

pytestmark = pytest.mark.django_db
ACME = "tenant:acme"


def run_verify(*args: str) -> tuple[bool, str]:
    from io import StringIO

    out = StringIO()
    try:
        call_command("verify_audit", *args, stdout=out)
    except CommandError:
        return False, out.getvalue()
    return True, out.getvalue()


def test_intact_chains_verify(record_events: Callable[..., Any]) -> None:
    record_events(5, tenant="acme")
    record_events(3, tenant="globex")
    record_events(2, tenant=None)
    reports = {report.chain: report for report in verify_chains()}
    assert {
        chain: (report.ok, report.events, report.last_seq) for chain, report in reports.items()
    } == {ACME: (True, 5, 5), "tenant:globex": (True, 3, 3), "system": (True, 2, 2)}
    assert reports[ACME].last_hash == ChainHead.objects.get(chain=ACME).hash
    ok, output = run_verify()
    assert ok and "ok      tenant:acme: 5 events" in output and "audit chains intact" in output


def test_verify_audit_checks_one_chain_and_refuses_an_unknown_one(
    record_events: Callable[..., Any], tamper: Callable[[], Any]
) -> None:
    record_events(3, tenant="acme")
    record_events(3, tenant="globex")
    with tamper():
        AuditEvent.objects.filter(chain="tenant:globex", seq=2).update(action="task.woken")
    assert run_verify("--chain", ACME)[0]
    assert run_verify("--tenant", "acme")[0]
    ok, output = run_verify("--tenant", "globex")
    assert not ok and "BROKEN  tenant:globex seq 2: hash mismatch" in output
    assert not run_verify("--chain", "tenant:nope")[0]


def test_updated_content_is_a_hash_mismatch_at_that_event(
    record_events: Callable[..., Any], tamper: Callable[[], Any]
) -> None:
    record_events(6)
    with tamper():
        AuditEvent.objects.filter(chain=ACME, seq=4).update(data={"index": 3, "note": "edited"})
    broken = verify_chain(ACME).broken
    assert broken is not None and (broken.seq, broken.kind) == (4, HASH_MISMATCH)
    ok, output = run_verify()
    assert not ok and "BROKEN  tenant:acme seq 4: hash mismatch" in output


def test_updated_time_or_actor_is_a_hash_mismatch(
    record_events: Callable[..., Any], tamper: Callable[[], Any]
) -> None:
    events = record_events(4)
    with tamper():
        AuditEvent.objects.filter(pk=events[1].pk).update(actor_display="mallory")
        AuditEvent.objects.filter(pk=events[2].pk).update(created_at=events[0].created_at)
    broken = verify_chain(ACME).broken
    assert broken is not None and (broken.seq, broken.kind) == (2, HASH_MISMATCH)


def test_content_and_hash_rewritten_together_break_the_next_link(
    record_events: Callable[..., Any], tamper: Callable[[], Any]
) -> None:
    record_events(5)
    row = (
        AuditEvent.objects.filter(chain=ACME, seq=3)
        .values_list(
            "chain",
            "seq",
            "created_at",
            "tenant_id",
            "actor_kind",
            "actor_id",
            "actor_display",
            "action",
            "task_id",
            "data",
            "request_id",
            "prev_hash",
            "hash",
        )
        .get()
    )
    forged = body_of_row(row)
    forged["data"] = {"index": 2, "note": "nothing happened"}
    with tamper():
        AuditEvent.objects.filter(chain=ACME, seq=3).update(
            data=forged["data"], hash=link_hash(row[-2], forged)
        )
    broken = verify_chain(ACME).broken
    assert broken is not None and (broken.seq, broken.kind) == (4, PREV_HASH_MISMATCH)


def test_deleted_event_is_a_seq_gap_at_its_place(
    record_events: Callable[..., Any], tamper: Callable[[], Any]
) -> None:
    record_events(6)
    with tamper():
        AuditEvent.objects.filter(chain=ACME, seq=3).delete()
    broken = verify_chain(ACME).broken
    assert broken is not None and (broken.seq, broken.kind) == (3, SEQ_GAP)
    assert "expected seq 3, found 4" in broken.detail


def test_deleted_last_event_is_caught_by_the_head(
    record_events: Callable[..., Any], tamper: Callable[[], Any]
) -> None:
    record_events(4)
    with tamper():
        AuditEvent.objects.filter(chain=ACME, seq=4).delete()
    broken = verify_chain(ACME).broken
    assert broken is not None and (broken.seq, broken.kind) == (4, SEQ_GAP)


def test_deleted_first_event_is_a_seq_gap_at_one(
    record_events: Callable[..., Any], tamper: Callable[[], Any]
) -> None:
    record_events(3)
    with tamper():
        AuditEvent.objects.filter(chain=ACME, seq=1).delete()
    broken = verify_chain(ACME).broken
    assert broken is not None and (broken.seq, broken.kind) == (1, SEQ_GAP)


def _forge_after(chain: str, seq: int, **changes: Any) -> AuditEvent:
    """An event that links correctly to event ``seq`` of ``chain``, as a forger would make it."""
    previous = AuditEvent.objects.get(chain=chain, seq=seq)
    event = AuditEvent(
        chain=chain,
        seq=seq + 1,
        created_at=previous.created_at,
        tenant_id=previous.tenant_id,
        actor_kind="operator",
        actor_id="99",
        actor_display="mallory",
        action="task.created",
        task_id="forged",
        data={"forged": True},
        request_id="",
        prev_hash=previous.hash,
    )
    for name, value in changes.items():
        setattr(event, name, value)
    row = [
        getattr(event, name)
        for name in (
            "chain",
            "seq",
            "created_at",
            "tenant_id",
            "actor_kind",
            "actor_id",
            "actor_display",
            "action",
            "task_id",
            "data",
            "request_id",
        )
    ]
    event.hash = link_hash(event.prev_hash, body_of_row(row))
    return event


def test_inserted_event_after_the_head_is_a_head_mismatch(
    record_events: Callable[..., Any],
) -> None:
    record_events(4)
    _forge_after(ACME, 4).save()  # an INSERT: the trigger only guards UPDATE and DELETE
    broken = verify_chain(ACME).broken
    assert broken is not None and (broken.seq, broken.kind) == (5, HEAD_MISMATCH)


def test_inserted_event_in_the_middle_breaks_the_link_after_it(
    record_events: Callable[..., Any], tamper: Callable[[], Any]
) -> None:
    record_events(6)
    forged = _forge_after(ACME, 3)
    with tamper():
        for seq in range(6, 3, -1):  # make room at seq 4, last first (unique chain+seq)
            AuditEvent.objects.filter(chain=ACME, seq=seq).update(seq=F("seq") + 1)
        forged.save()
        ChainHead.objects.filter(chain=ACME).update(seq=7)
    broken = verify_chain(ACME).broken
    assert broken is not None and (broken.seq, broken.kind) == (5, PREV_HASH_MISMATCH)


def test_reordered_events_break_at_the_first_moved_one(
    record_events: Callable[..., Any], tamper: Callable[[], Any]
) -> None:
    record_events(6)
    with tamper():
        AuditEvent.objects.filter(chain=ACME, seq=3).update(seq=-3)
        AuditEvent.objects.filter(chain=ACME, seq=4).update(seq=3)
        AuditEvent.objects.filter(chain=ACME, seq=-3).update(seq=4)
    broken = verify_chain(ACME).broken
    assert broken is not None and (broken.seq, broken.kind) == (3, PREV_HASH_MISMATCH)
    ok, output = run_verify("--chain", ACME)
    assert not ok and "tenant:acme seq 3: prev_hash mismatch" in output


def test_head_moved_back_is_a_head_mismatch(record_events: Callable[..., Any]) -> None:
    record_events(4)
    ChainHead.objects.filter(chain=ACME).update(hash="f" * 64)
    broken = verify_chain(ACME).broken
    assert broken is not None and (broken.seq, broken.kind) == (4, HEAD_MISMATCH)


def test_tampering_one_chain_leaves_the_others_verified(
    record_events: Callable[..., Any], tamper: Callable[[], Any]
) -> None:
    record_events(3, tenant="acme")
    record_events(3, tenant="globex")
    with tamper():
        AuditEvent.objects.filter(chain=ACME, seq=2).update(task_id="other")
    reports = {report.chain: report.ok for report in verify_chains()}
    assert reports == {ACME: False, "tenant:globex": True}


def test_body_of_event_is_what_the_stored_hash_covers(
    record_events: Callable[..., Any],
) -> None:
    from audit.chain import body_of_event

    for event in AuditEvent.objects.filter(pk__in=[e.pk for e in record_events(3)]):
        assert link_hash(event.prev_hash, body_of_event(event)) == event.hash
