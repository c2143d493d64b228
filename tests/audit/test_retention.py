"""Retention purges a tenant's old events through one audited path and leaves a checkpoint."""

from __future__ import annotations

import io
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from audit.chain import CHECKPOINT_MISMATCH, PREV_HASH_MISMATCH, SEQ_GAP, verify_chain
from audit.export import ExportFilters, export_to_file, verify_export
from audit.models import AuditEvent, RetentionCheckpoint, RetentionPolicy
from audit.record import Actor
from audit.retention import RetentionRefused, purge_due, purge_tenant

pytestmark = pytest.mark.django_db
ACME = "tenant:acme"
SYSTEM = Actor.system("test")


@pytest.fixture
def aged(record_events: Callable[..., Any]) -> Callable[..., list[AuditEvent]]:
    """Record events ``days_ago`` days in the past."""

    def make(count: int, days_ago: float, tenant: str = "acme") -> list[AuditEvent]:
        with time_machine.travel(timezone.now() - timedelta(days=days_ago), tick=False):
            return record_events(count, tenant=tenant)

    return make


def test_purge_deletes_old_events_leaves_a_checkpoint_and_is_audited(
    aged: Callable[..., Any],
) -> None:
    old = aged(4, days_ago=40)
    aged(3, days_ago=5)
    aged(2, days_ago=40, tenant="globex")
    result = purge_tenant(tenant_slug="acme", older_than_days=30, actor=SYSTEM)
    assert (result.purged, result.checkpoint_seq, result.checkpoint_hash) == (4, 4, old[-1].hash)
    assert list(
        AuditEvent.objects.filter(chain=ACME).values_list("seq", flat=True).order_by("seq")
    ) == [5, 6, 7, 8]
    checkpoint = RetentionCheckpoint.objects.get(chain=ACME)
    assert (checkpoint.seq, checkpoint.hash, checkpoint.purged) == (4, old[-1].hash, 4)
    purged = AuditEvent.objects.get(chain=ACME, action="audit.purged")
    assert purged.seq == 8 == result.event_seq
    assert purged.data["checkpoint"] == {"seq": 4, "hash": old[-1].hash}
    assert purged.data["purged"] == 4 and purged.data["older_than_days"] == 30
    assert AuditEvent.objects.filter(chain="tenant:globex").count() == 2  # per tenant
    report = verify_chain(ACME)
    assert report.ok and report.start_seq == 4 and report.events == 4


def test_verify_audit_passes_after_retention(aged: Callable[..., Any]) -> None:
    aged(3, days_ago=100)
    aged(2, days_ago=1)
    call_command("purge_audit", "--tenant", "acme", "--older-than-days", "30", stdout=io.StringIO())
    output = io.StringIO()
    call_command("verify_audit", stdout=output)
    assert "tenant:acme: 3 events after checkpoint seq 3" in output.getvalue()


def test_purges_repeat_and_each_starts_where_the_last_ended(aged: Callable[..., Any]) -> None:
    aged(3, days_ago=90)
    aged(3, days_ago=50)
    aged(1, days_ago=1)
    assert purge_tenant(tenant_slug="acme", older_than_days=60, actor=SYSTEM).purged == 3
    second = purge_tenant(tenant_slug="acme", older_than_days=30, actor=SYSTEM)
    # 4-6 go; 7 and the first audit.purged (8) are newer and stay.
    assert (second.purged, second.checkpoint_seq) == (3, 6)
    assert verify_chain(ACME).ok
    nothing = purge_tenant(tenant_slug="acme", older_than_days=30, actor=SYSTEM)
    assert nothing.purged == 0 and nothing.event_seq is None
    assert AuditEvent.objects.filter(chain=ACME, action="audit.purged").count() == 2


def test_purge_removes_only_a_prefix_even_if_clocks_disagree(aged: Callable[..., Any]) -> None:
    aged(2, days_ago=90)
    aged(1, days_ago=1)
    aged(2, days_ago=90)  # recorded later but stamped older (a skewed clock)
    result = purge_tenant(tenant_slug="acme", older_than_days=30, actor=SYSTEM)
    assert result.purged == 2 and verify_chain(ACME).ok


def test_a_broken_chain_is_not_purged(aged: Callable[..., Any], tamper: Callable[[], Any]) -> None:
    aged(4, days_ago=90)
    with tamper():
        AuditEvent.objects.filter(chain=ACME, seq=2).update(action="task.woken")
    with pytest.raises(RetentionRefused, match="broken chain"):
        purge_tenant(tenant_slug="acme", older_than_days=30, actor=SYSTEM)
    assert AuditEvent.objects.filter(chain=ACME).count() == 4
    with pytest.raises(CommandError, match="seq 2: hash mismatch"):
        call_command(
            "purge_audit", "--tenant", "acme", "--older-than-days", "30", stdout=io.StringIO()
        )


def test_bad_requests_are_refused(cast: dict[str, Any]) -> None:
    with pytest.raises(RetentionRefused):
        purge_tenant(tenant_slug="nope", older_than_days=30, actor=SYSTEM)
    with pytest.raises(RetentionRefused):
        purge_tenant(tenant_slug="acme", older_than_days=0, actor=SYSTEM)
    with pytest.raises(CommandError, match="no retention policy"):
        call_command("purge_audit", "--tenant", "acme", stdout=io.StringIO())


def test_policies_set_each_tenants_retention(
    aged: Callable[..., Any], cast: dict[str, Any]
) -> None:
    aged(2, days_ago=20)
    aged(2, days_ago=20, tenant="globex")
    RetentionPolicy.objects.create(tenant=cast["alice"]["tenant"], keep_days=10)
    RetentionPolicy.objects.create(tenant=cast["bob"]["tenant"], keep_days=30)
    results = {result.chain: result.purged for result in purge_due()}
    assert results == {ACME: 2, "tenant:globex": 0}
    output = io.StringIO()
    call_command("purge_audit", "--due", stdout=output)
    assert "tenant:acme: nothing older to purge" in output.getvalue()


def test_a_forged_checkpoint_is_caught(aged: Callable[..., Any], tamper: Callable[[], Any]) -> None:
    events = aged(5, days_ago=90)
    with tamper():  # "retention" by hand: events deleted, a checkpoint made up
        AuditEvent.objects.filter(chain=ACME, seq__lte=2).delete()
        RetentionCheckpoint.objects.create(
            chain=ACME, seq=2, hash=events[1].hash, purged=2, cutoff=timezone.now()
        )
    broken = verify_chain(ACME).broken
    assert broken is not None and (broken.seq, broken.kind) == (2, CHECKPOINT_MISMATCH)


def test_a_deleted_or_altered_checkpoint_is_caught(
    aged: Callable[..., Any], tamper: Callable[[], Any]
) -> None:
    aged(3, days_ago=90)
    aged(1, days_ago=1)
    purge_tenant(tenant_slug="acme", older_than_days=30, actor=SYSTEM)
    with tamper():
        RetentionCheckpoint.objects.filter(chain=ACME).update(hash="e" * 64)
    broken = verify_chain(ACME).broken
    assert broken is not None and (broken.seq, broken.kind) == (4, PREV_HASH_MISMATCH)
    with tamper():
        RetentionCheckpoint.objects.filter(chain=ACME).delete()
    broken = verify_chain(ACME).broken
    assert broken is not None and (broken.seq, broken.kind) == (1, SEQ_GAP)


def test_an_export_made_before_a_purge_still_verifies(aged: Callable[..., Any]) -> None:
    aged(3, days_ago=90)
    aged(2, days_ago=1)
    out = io.BytesIO()
    manifest = export_to_file(ExportFilters(chain=ACME), "jsonl", out, actor=SYSTEM)
    purge_tenant(tenant_slug="acme", older_than_days=30, actor=SYSTEM)
    result = verify_export(io.BytesIO(out.getvalue()), manifest)
    assert result.ok, result.problems
    assert result.notes == [
        f"{ACME}: 3 exported events were purged by retention since; not compared"
    ]
    after = io.BytesIO()
    manifest = export_to_file(ExportFilters(chain=ACME), "csv", after, actor=SYSTEM)
    assert manifest["checkpoints"][ACME]["seq"] == 3
    assert verify_export(io.BytesIO(after.getvalue()), manifest).ok
