"""The audit events are partitioned by month on PostgreSQL (audit migration 0008,
audit/partitions.py): every partition, present or created later, keeps the append-only rules and
refuses a second event at a chain's seq; retention drops a whole partition when all of it is past
retention, and otherwise purges row by row as before."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.utils import timezone

from audit import partitions, retention
from audit.chain import verify_chain
from audit.export import ExportFilters, export_to_file, verify_export
from audit.holds import place_hold
from audit.models import AuditEvent, RetentionCheckpoint, RetentionPolicy
from audit.record import Actor, record
from audit.seal import seal_pending
from mcptasks import sweeps
from mcptasks.models import Tenant

pytestmark = [pytest.mark.pg, pytest.mark.django_db]
SYSTEM = Actor.system("test")


def month(ahead: int) -> datetime:
    """The first instant (UTC) of the month ``ahead`` months after the current one."""
    now = timezone.now().astimezone(UTC)
    index = now.year * 12 + now.month - 1 + ahead
    return datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)


def partition_of(month_start: datetime) -> str:
    return f"audit_auditevent_p{month_start:%Y%m}"


def partition_names() -> list[str]:
    return [part.name for part in partitions.partitions()]


def where(event: AuditEvent) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tableoid::regclass::text FROM audit_auditevent WHERE id = %s", [event.pk]
        )
        return str(cursor.fetchone()[0])


def tenant_at(slug: str, at: datetime, keep_days: int | None = 30) -> Tenant:
    with time_machine.travel(at, tick=False):
        tenant = Tenant.objects.create(slug=slug, name=slug.title())
    if keep_days is not None:
        RetentionPolicy.objects.create(tenant=tenant, keep_days=keep_days)
    return tenant


def events_at(tenant: Tenant, at: datetime, count: int, task_id: str = "") -> list[AuditEvent]:
    with time_machine.travel(at, tick=False):
        return [
            record(
                action="task.created",
                actor=SYSTEM,
                tenant_id=tenant.pk,
                tenant_slug=tenant.slug,
                task_id=task_id,
                data={"n": n},
            )
            for n in range(count)
        ]


@pytest.fixture
def month2() -> Iterator[datetime]:
    """The month after next: its partition exists (created ahead) and holds nothing yet."""
    start = month(2)
    assert partition_of(start) in partition_names()
    assert not AuditEvent.objects.filter(created_at__gte=start, created_at__lt=month(3)).exists()
    yield start


def after_retention(days: int = 30) -> datetime:
    """A moment at which events of the month after next are ``days`` + 10 days old."""
    return month(3) + timedelta(days=days + 10)


# ---------------------------------------------------------------- the table and its guards
def test_events_land_in_the_partition_of_their_month_with_ids_from_one_sequence(
    month2: datetime,
) -> None:
    initech = tenant_at("initech", month2)
    now_event = record(action="task.created", actor=SYSTEM, tenant_id=None, tenant_slug=None)
    later = events_at(initech, month2 + timedelta(days=3), 2)
    assert where(later[0]) == where(later[1]) == partition_of(month2)
    assert where(now_event) != partition_of(month2)
    assert now_event.pk < later[0].pk < later[1].pk
    assert verify_chain("tenant:initech").ok


def test_a_second_event_at_a_chains_seq_is_refused_in_any_partition(month2: datetime) -> None:
    initech = tenant_at("initech", month2)
    first = events_at(initech, month2 + timedelta(days=1), 1)[0]
    columns = (
        "chain, seq, created_at, tenant_id, actor_kind, actor_id, actor_display, action,"
        " task_id, data, request_id, prev_hash, hash"
    )
    for created_at in (first.created_at, month(1) + timedelta(days=2), month(0)):
        with (
            pytest.raises(IntegrityError, match=r"already has seq 1|duplicate key"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(
                f"INSERT INTO audit_auditevent ({columns}) SELECT chain, seq, %s, tenant_id,"
                " actor_kind, actor_id, actor_display, action, task_id, data, request_id,"
                f" prev_hash, hash FROM audit_auditevent WHERE id = %s",
                [created_at, first.pk],
            )
    assert AuditEvent.objects.filter(chain="tenant:initech", seq=1).count() == 1


def test_a_seal_giving_a_seq_its_chain_already_has_is_refused(
    month2: datetime, settings: Any
) -> None:
    initech = tenant_at("initech", month2)
    sealed = events_at(initech, month2 + timedelta(days=1), 2)  # seq 1, 2 in month2
    settings.MCPTASKS_AUDIT_SEAL_DELAY_MS = 60_000
    unsealed = events_at(initech, month(3) + timedelta(days=1), 2)  # next month's partition
    settings.MCPTASKS_AUDIT_SEAL_DELAY_MS = 0
    ids = [event.pk for event in unsealed]
    for seqs in ([2, 3], [3, 3]):  # a seq of month2's partition; the same seq twice
        with (
            pytest.raises(IntegrityError, match=r"already has a seq|duplicate key"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(
                "SELECT audit_seal_events(%s::bigint[], %s::bigint[], %s::varchar[],"
                " %s::varchar[])",
                [ids, seqs, [sealed[-1].hash] * 2, ["f" * 64] * 2],
            )
    assert AuditEvent.objects.filter(pk__in=ids, seq__isnull=True).count() == 2
    with time_machine.travel(month(3) + timedelta(days=2), tick=False):
        assert seal_pending() >= 2
    assert verify_chain("tenant:initech").ok


def test_partitions_created_later_keep_the_append_only_rules_and_are_sealed(
    month2: datetime, settings: Any
) -> None:
    created = partitions.ensure_partitions(months_ahead=6)
    assert created == [partition_of(month(k)) for k in (4, 5, 6)]
    assert partitions.ensure_partitions(months_ahead=6) == []  # idempotent
    initech = tenant_at("initech", month(5))
    settings.MCPTASKS_AUDIT_SEAL_DELAY_MS = 60_000  # recorded unsealed, sealed below
    unsealed = events_at(initech, month(5) + timedelta(days=1), 2)
    settings.MCPTASKS_AUDIT_SEAL_DELAY_MS = 0
    assert {where(event) for event in unsealed} == {partition_of(month(5))}
    assert all(event.seq is None for event in unsealed)
    with time_machine.travel(month(5) + timedelta(days=2), tick=False):
        assert seal_pending() >= 2
    assert verify_chain("tenant:initech").ok
    table = partition_of(month(5))
    for sql in (
        f"UPDATE {table} SET action = 'x'",
        f"DELETE FROM {table}",
        "UPDATE audit_auditevent SET data = '{}' WHERE chain = 'tenant:initech'",
        "DELETE FROM audit_auditevent WHERE chain = 'tenant:initech'",
    ):
        with (
            pytest.raises(DatabaseError, match="append-only"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(sql)
    assert AuditEvent.objects.filter(chain="tenant:initech").count() == 2


def test_an_event_no_month_covers_goes_to_the_default_partition_and_its_month_waits() -> None:
    far = month(8)
    initech = tenant_at("initech", far)
    event = events_at(initech, far + timedelta(days=1), 1)[0]
    assert where(event) == "audit_auditevent_default"
    created = partitions.ensure_partitions(months_ahead=9)
    assert partition_of(far) not in created and partition_of(month(9)) in created
    assert where(event) == "audit_auditevent_default" and verify_chain("tenant:initech").ok


def test_the_sweep_creates_the_coming_months_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partitions, "MONTHS_AHEAD", 5)
    partitions.ensuring.reset()
    done = sweeps.run_all()
    assert done["audit_partitions"] == 2  # the months 4 and 5 from today
    assert partition_of(month(5)) in partition_names()
    assert sweeps.audit_partitions() == 0  # at most hourly per process


# ---------------------------------------------------------------- retention by partition
def test_retention_drops_a_partition_past_retention_whole(month2: datetime) -> None:
    initech = tenant_at("initech", month2)
    hooli = tenant_at("hooli", month2, keep_days=45)
    old = events_at(initech, month2 + timedelta(days=2), 3)
    events_at(hooli, month2 + timedelta(days=3), 2)
    kept = events_at(initech, month(3) + timedelta(days=25), 1)  # next month: stays
    out = io.BytesIO()
    before = export_to_file(ExportFilters(chain="tenant:initech"), "jsonl", out, actor=SYSTEM)

    # initech's cutoff is 20 days into the next month, hooli's 5 days: both after month2.
    results = retention.purge_due(now=month(3) + timedelta(days=50))

    assert partition_of(month2) not in partition_names()
    by_chain = {(r.chain, r.partition): r for r in results}
    dropped = by_chain[("tenant:initech", partition_of(month2))]
    assert (dropped.purged, dropped.checkpoint_seq, dropped.checkpoint_hash) == (3, 3, old[-1].hash)
    assert by_chain[("tenant:hooli", partition_of(month2))].purged == 2
    checkpoint = RetentionCheckpoint.objects.get(chain="tenant:initech", seq=3)
    assert (checkpoint.hash, checkpoint.purged) == (old[-1].hash, 3)
    purged = AuditEvent.objects.get(chain="tenant:initech", seq=dropped.event_seq)
    assert purged.action == "audit.purged"
    assert purged.data["checkpoint"] == {"seq": 3, "hash": old[-1].hash}
    assert purged.data["partition"] == partition_of(month2) and purged.data["purged"] == 3
    assert AuditEvent.objects.filter(pk=kept[0].pk).exists()  # newer than the cutoff
    for chain in ("tenant:initech", "tenant:hooli"):
        assert verify_chain(chain).ok
    assert verify_export(io.BytesIO(out.getvalue()), before).ok
    after = io.BytesIO()
    manifest = export_to_file(ExportFilters(chain="tenant:initech"), "csv", after, actor=SYSTEM)
    assert verify_export(io.BytesIO(after.getvalue()), manifest).ok


def test_a_chain_without_retention_in_the_partition_keeps_it_and_rows_are_purged(
    month2: datetime,
) -> None:
    initech = tenant_at("initech", month2)
    forever = tenant_at("forever", month2, keep_days=None)
    events_at(initech, month2 + timedelta(days=2), 3)
    events_at(forever, month2 + timedelta(days=2), 2)
    results = retention.purge_due(now=after_retention())
    assert partition_of(month2) in partition_names()
    assert [(r.chain, r.purged, r.partition) for r in results if r.purged] == [
        ("tenant:initech", 3, None)
    ]
    assert AuditEvent.objects.filter(chain="tenant:forever").count() == 2
    assert verify_chain("tenant:initech").ok and verify_chain("tenant:forever").ok


def test_a_system_event_in_the_partition_keeps_it(month2: datetime) -> None:
    initech = tenant_at("initech", month2)
    events_at(initech, month2 + timedelta(days=2), 2)
    with time_machine.travel(month2 + timedelta(days=3), tick=False):
        record(action="auth.login_failed", actor=SYSTEM, tenant_id=None, tenant_slug=None)
    retention.purge_due(now=after_retention())
    assert partition_of(month2) in partition_names()
    assert AuditEvent.objects.filter(chain="tenant:initech", action="task.created").count() == 0


@pytest.mark.parametrize("scope", ["task", "tenant"])
def test_a_legal_hold_stops_the_drop(month2: datetime, scope: str) -> None:
    initech = tenant_at("initech", month2)
    hooli = tenant_at("hooli", month2)
    events_at(initech, month2 + timedelta(days=2), 2)
    events_at(hooli, month2 + timedelta(days=2), 2, task_id="t-1")
    task_id = "t-1" if scope == "task" else ""
    place_hold(tenant_slug="hooli", task_id=task_id, reason="litigation", actor=SYSTEM)
    results = retention.purge_due(now=after_retention())
    assert partition_of(month2) in partition_names()
    assert all(r.partition is None for r in results)
    assert AuditEvent.objects.filter(chain="tenant:hooli", action="task.created").count() == 2
    assert not AuditEvent.objects.filter(chain="tenant:initech", action="task.created").exists()
    assert verify_chain("tenant:hooli").ok and verify_chain("tenant:initech").ok


def test_a_straggler_in_a_later_partition_keeps_the_partition(month2: datetime) -> None:
    """Seq follows the order of recording, not created_at: an event stamped into the next
    month but sealed before this month's events makes the partition no prefix of the chain."""
    initech = tenant_at("initech", month2)
    events_at(initech, month(3) + timedelta(days=1), 1)  # seq 1, next month (a skewed clock)
    events_at(initech, month2 + timedelta(days=2), 2)  # seq 2-3, this month
    retention.purge_due(now=month(3) + timedelta(days=2 + 30))  # cutoff after this month only
    assert partition_of(month2) in partition_names()
    assert verify_chain("tenant:initech").ok


def test_a_failure_after_the_drop_leaves_the_partition_and_a_chain_that_verifies(
    month2: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    initech = tenant_at("initech", month2)
    events_at(initech, month2 + timedelta(days=2), 2)

    def crash(**kwargs: Any) -> Any:
        raise RuntimeError("the process died here")

    monkeypatch.setattr(retention, "_checkpoint", crash)
    with pytest.raises(RuntimeError):
        retention.purge_due(now=after_retention())
    assert partition_of(month2) in partition_names()
    assert AuditEvent.objects.filter(chain="tenant:initech").count() == 2
    assert not RetentionCheckpoint.objects.filter(chain="tenant:initech").exists()
    assert verify_chain("tenant:initech").ok


def test_the_drop_function_refuses_what_is_not_a_purgeable_prefix(month2: datetime) -> None:
    initech = tenant_at("initech", month2)
    events = events_at(initech, month2 + timedelta(days=2), 3)
    name = partition_of(month2)
    cutoff = after_retention() - timedelta(days=30)
    for chain, last_seq, when, message in (
        ("tenant:initech", 2, cutoff, "not in the purge"),  # seq 3 is past the last seq
        ("tenant:initech", 3, events[0].created_at, "not in the purge"),  # not older
        ("tenant:other", 3, cutoff, "not in the purge"),  # the partition's chain not listed
    ):
        with pytest.raises(DatabaseError, match=message), transaction.atomic():
            partitions.drop_partition(name, {chain: (last_seq, when)})
    with pytest.raises(DatabaseError, match="not a bounded partition"), transaction.atomic():
        partitions.drop_partition("audit_auditevent_default", {"tenant:initech": (3, cutoff)})
    assert name in partition_names()
    assert verify_chain("tenant:initech").ok
