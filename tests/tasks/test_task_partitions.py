"""The task table is partitioned by day on PostgreSQL (migration 0016, mcptasks/task_partitions.py):
a task id starts with its creation day and the task lives in that day's partition; the TTL purge
drops a whole ended day once every task of it is due — each with its ``task.purged`` event, its
dependent rows deleted — and a day something keeps is left whole, then purged row by row."""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from importlib import import_module
from typing import Any

import pytest
import time_machine
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from audit.holds import place_hold
from audit.models import AuditEvent
from audit.record import Actor
from mcptasks import lifecycle, sweeps, task_partitions
from mcptasks.lifecycle.retention import UNDECIDED_EFFECTS
from mcptasks.models import TERMINAL_STATES, Effect, EffectState, Task, TaskState, TaskStep
from mcptasks.task_ids import day_prefix, new_task_id

SYSTEM = Actor.system("test")
MIGRATION = import_module("mcptasks.migrations.0016_partition_tasks")


def test_a_task_id_starts_with_its_creation_day_and_keeps_192_random_bits() -> None:
    at = datetime(2026, 12, 3, 23, 59, 59, tzinfo=UTC)
    task_id = new_task_id(at)
    assert task_id.startswith("~20261203")
    assert re.fullmatch(r"~20261203[A-Za-z0-9_-]{32}", task_id)
    assert new_task_id(at) != task_id
    # Every id made before partitioning (token_urlsafe alone) sorts below "~", byte-wise.
    assert max("-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz") < "~"


def test_the_purge_function_writes_the_codes_terminal_and_undecided_states() -> None:
    sql = MIGRATION.FUNCTIONS
    terminal = sorted(str(state) for state in TERMINAL_STATES)
    assert "t.state NOT IN (" + ", ".join(f"''{s}''" for s in terminal) + ")" in sql
    undecided = sorted(str(state) for state in UNDECIDED_EFFECTS)
    assert "e.state IN (" + ", ".join(f"''{s}''" for s in undecided) + ")" in sql


@pytest.mark.pg
@pytest.mark.django_db
def test_a_task_is_created_in_its_days_partition(make_task: Callable[..., Task]) -> None:
    task = make_task()
    assert task.pk.startswith(day_prefix(task.created_at))
    assert where(task.pk) == f"mcptasks_task_p{task.created_at.astimezone(UTC):%Y%m%d}"
    assert Task.objects.get(pk=task.pk).tool_name == task.tool_name


def where(task_id: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tableoid::regclass::text FROM mcptasks_task WHERE id = %s", [task_id]
        )
        return str(cursor.fetchone()[0])


def names() -> list[str]:
    return [part.name for part in task_partitions.partitions()]


@pytest.mark.pg
@pytest.mark.django_db
def test_the_task_table_keeps_no_index_another_one_covers(
    make_task: Callable[..., Task],
) -> None:
    """Migration 0018: no index of the tenant or principal alone (the created-order indexes
    lead with them) and no LIKE index of an id (the ids' "C" collation lets the primary key
    serve a prefix); every partition has the parent's indexes."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i"
            " JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'mcptasks_task'::regclass"
        )
        indexes = dict(cursor.fetchall())
        cursor.execute("SELECT count(*) FROM pg_index WHERE indrelid = %s::regclass", [names()[1]])
        in_a_day = cursor.fetchone()[0]
    assert not [name for name, sql in indexes.items() if "pattern_ops" in sql]
    one_column = {
        sql.split("USING btree ")[1]
        for sql in indexes.values()
        if "btree" in sql and "," not in sql
    }
    assert "(tenant_id)" not in one_column and "(principal_id)" not in one_column
    assert "(retry_of_id)" in one_column and "task_retry_of" in indexes
    assert in_a_day == len(indexes)
    task = make_task()
    prefix = Task.objects.filter(pk__startswith=task.pk[:12])
    plan = prefix.explain()
    assert "_pkey" in plan and "Seq Scan on mcptasks_task_p" not in plan, plan
    assert list(prefix.values_list("pk", flat=True)) == [task.pk]


@pytest.mark.pg
@pytest.mark.django_db
def test_ensure_creates_today_and_the_days_ahead_once() -> None:
    today = timezone.now().astimezone(UTC).date()
    expected = [f"mcptasks_task_p{today + timedelta(days=n):%Y%m%d}" for n in range(8)]
    assert set(expected) <= set(names())  # the migration created them
    assert task_partitions.ensure_partitions(7) == []
    created = task_partitions.ensure_partitions(9)
    assert created == [f"mcptasks_task_p{today + timedelta(days=n):%Y%m%d}" for n in (8, 9)]
    parts = task_partitions.partitions()
    assert parts[0].name == "mcptasks_task_legacy" and parts[0].lower is None
    assert parts[0].upper == "~"
    assert parts[-1].name == "mcptasks_task_default" and parts[-1].is_default
    out = io.StringIO()
    call_command("task_partitions", stdout=out)
    assert f"{expected[0]}\t~{today:%Y%m%d} .. ~{today + timedelta(days=1):%Y%m%d}\t" in (
        out.getvalue()
    )


@pytest.fixture
def days_ago(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[int], tuple[str, datetime]]]:
    """``days_ago(n)``: a partition of the day n days ago, made as the ensure function makes
    one (it makes today's and later only); its name and the day's noon. The partition purge is
    on, as in production, and the sweep's next run tries it."""
    settings.MCPTASKS_TASK_PARTITION_PURGE = True
    sweeps.purging_days.reset()

    def make(days: int) -> tuple[str, datetime]:
        day = timezone.now().astimezone(UTC).date() - timedelta(days=days)
        name = task_partitions.attach_day(day)
        return name, datetime(day.year, day.month, day.day, 12, tzinfo=UTC)

    yield make
    sweeps.purging_days.reset()


def finished_at(make_task: Callable[..., Task], at: datetime, **options: Any) -> Task:
    """A task created at ``at`` with a 1-minute TTL and completed at once."""
    with time_machine.travel(at, tick=False):
        task = make_task(ttl_ms=60_000, **options)
        lifecycle.task_claim(task_id=task.pk, worker="w1")
        lifecycle.task_complete(task_id=task.pk, attempt=1, result={"content": []})
    return Task.objects.get(pk=task.pk)


@pytest.mark.pg
@pytest.mark.django_db
def test_an_ended_day_whose_tasks_are_all_due_is_dropped_whole(
    make_task: Callable[..., Task], days_ago: Callable[[int], tuple[str, datetime]]
) -> None:
    name, noon = days_ago(3)
    old = [finished_at(make_task, noon) for _ in range(3)]
    TaskStep.objects.create(task=old[0], key="now:1", kind="now", value=1)
    Effect.objects.create(
        task=old[1],
        tenant_id=old[1].tenant_id,
        step="deploy",
        idempotency_key="k1",
        state=EffectState.APPLIED,
    )
    retry = make_task()  # today's: points at a task of the dropped day
    Task.objects.filter(pk=retry.pk).update(retry_of=old[2])
    assert {where(task.pk) for task in old} == {name}

    assert sweeps.purge_tasks() == 3

    assert name not in names()
    assert not Task.objects.filter(pk__in=[task.pk for task in old]).exists()
    assert not TaskStep.objects.filter(task_id=old[0].pk).exists()
    assert not Effect.objects.filter(task_id=old[1].pk).exists()
    assert Task.objects.get(pk=retry.pk).retry_of_id is None
    purged = AuditEvent.objects.filter(action="task.purged").order_by("task_id")
    assert sorted(event.task_id for event in purged) == sorted(task.pk for task in old)
    assert {event.data["partition"] for event in purged} == {name}
    call_command("verify_audit", stdout=io.StringIO())


@pytest.mark.pg
@pytest.mark.django_db
def test_a_days_purge_events_go_in_batches_but_one_by_one_for_a_tenant_with_subscriptions(
    make_task: Callable[..., Task],
    days_ago: Callable[[int], tuple[str, datetime]],
    sealed_later: None,
    subscribe: Callable[..., Any],
    cast: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django.db import connection as conn
    from django.test.utils import CaptureQueriesContext

    from audit import seal
    from audit.chain import verify_chain
    from mcptasks.lifecycle import retention

    monkeypatch.setattr(retention, "PURGED_EVENTS_BATCH", 2)
    name, noon = days_ago(3)
    quiet = [finished_at(make_task, noon) for _ in range(5)]  # acme: no subscription
    loud = [finished_at(make_task, noon, owner="bob") for _ in range(2)]
    subscribe(cast["bob"]["tenant"], ["task.completed"])  # globex's events pass the outbox
    seal.seal_pending()

    with CaptureQueriesContext(conn) as queries:
        assert lifecycle.task_purge_days() == [(name, 7)]

    inserts = [q["sql"] for q in queries if q["sql"].startswith('INSERT INTO "audit_auditevent"')]
    assert len(inserts) == 3 + 2  # acme's five in batches of two, globex's one by one
    purged = AuditEvent.objects.filter(action="task.purged")
    assert sorted(e.task_id for e in purged) == sorted(t.pk for t in quiet + loud)
    assert all(e.data == {"state": "completed", "partition": name} for e in purged)
    seal.seal_pending()
    for tenant in ("acme", "globex"):
        report = verify_chain(f"tenant:{tenant}")
        assert report.broken is None and report.unsealed == 0, report


@pytest.mark.pg
@pytest.mark.django_db
@pytest.mark.parametrize("keeper", ["running", "not_expired", "held", "unknown_effect"])
def test_a_day_with_a_task_not_due_is_kept_whole(
    keeper: str,
    make_task: Callable[..., Task],
    days_ago: Callable[[int], tuple[str, datetime]],
    cast: dict[str, Any],
) -> None:
    name, noon = days_ago(3)
    due = finished_at(make_task, noon)
    if keeper == "running":
        with time_machine.travel(noon, tick=False):
            kept = make_task(ttl_ms=60_000)
            lifecycle.task_claim(task_id=kept.pk, worker="w1")
    elif keeper == "not_expired":
        kept = finished_at(make_task, noon)
        Task.objects.filter(pk=kept.pk).update(expires_at=timezone.now() + timedelta(days=1))
    elif keeper == "held":
        kept = finished_at(make_task, noon)
        place_hold(
            tenant_slug=cast["alice"]["tenant"].slug,
            task_id=kept.pk,
            reason="litigation",
            actor=SYSTEM,
        )
    else:
        kept = finished_at(make_task, noon)
        Effect.objects.create(
            task=kept,
            tenant_id=kept.tenant_id,
            step="deploy",
            idempotency_key="k1",
            state=EffectState.UNKNOWN,
        )

    assert lifecycle.task_purge_days() == []

    assert name in names()
    assert Task.objects.filter(pk=kept.pk).exists()
    assert not AuditEvent.objects.filter(action="task.purged", data__partition=name).exists()
    # Three days ago is past the default TTL plus the grace: the row purge takes the due task.
    assert task_partitions.row_purge_below(timezone.now()) > due.pk
    sweeps.purge_tasks()
    assert not Task.objects.filter(pk=due.pk).exists()
    assert Task.objects.filter(pk=kept.pk).exists()
    if keeper == "running":
        assert Task.objects.get(pk=kept.pk).state == TaskState.RUNNING


@pytest.mark.pg
@pytest.mark.django_db
def test_the_row_purge_waits_for_a_recent_day_to_be_dropped_whole(
    make_task: Callable[..., Task], settings: Any
) -> None:
    settings.MCPTASKS_TASK_PARTITION_PURGE = True
    settings.MCPTASKS_TERMINAL_GRACE_S = 0
    task = finished_at(make_task, timezone.now() - timedelta(minutes=5))
    assert task.expires_at < timezone.now()
    sweeps.purge_tasks()
    assert Task.objects.filter(pk=task.pk).exists()  # today's: its day is not over
    settings.MCPTASKS_TASK_PARTITION_PURGE = False
    assert sweeps.purge_tasks() == 1  # row by row at its TTL plus the grace
    assert not Task.objects.filter(pk=task.pk).exists()


@pytest.mark.pg
@pytest.mark.django_db
def test_the_purge_function_refuses_what_is_not_a_day_partition() -> None:
    from django.db import DatabaseError, transaction

    for name in ("mcptasks_task_legacy", "mcptasks_task_default", "mcptasks_effect"):
        with (
            pytest.raises(DatabaseError, match="not a day partition"),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute("SELECT mcptasks_task_partition_purge(%s, now(), true)", [name])
    assert "mcptasks_task_legacy" in names()


def test_short_displays_of_a_task_id_skip_the_day_its_tasks_share() -> None:
    from dashboard.templatetags.dashboard_tags import short_id

    first, second = (new_task_id(datetime(2026, 12, 3, tzinfo=UTC)) for _ in range(2))
    assert short_id(first) == first[9:19] + "…" and short_id(first) != short_id(second)
    assert short_id("0123456789abcdef") == "0123456789…"  # a hash or an older id: as it is


def test_a_tasks_channel_group_is_a_valid_group_name() -> None:
    from channels.layers import InMemoryChannelLayer

    from mcptasks.events import task_group_name

    task_id = new_task_id()
    group = task_group_name(task_id)
    assert InMemoryChannelLayer().require_valid_group_name(group)
    assert group != task_group_name(new_task_id())


@pytest.mark.pg
@pytest.mark.django_db
def test_the_sweep_creates_the_coming_days_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(task_partitions, "DAYS_AHEAD", 9)
    task_partitions.ensuring.reset()
    done = sweeps.run_all()
    assert done["task_partitions"] == 2  # the days 8 and 9 from today
    far = timezone.now().astimezone(UTC).date() + timedelta(days=9)
    assert f"mcptasks_task_p{far:%Y%m%d}" in names()
    assert sweeps.task_partitions_ahead() == 0  # at most hourly per process


@pytest.mark.pg
@pytest.mark.django_db
def test_a_task_of_a_day_with_no_partition_goes_to_the_default_one(
    make_task: Callable[..., Task],
) -> None:
    far = timezone.now() + timedelta(days=30)
    with time_machine.travel(far, tick=False):
        task = make_task()
    assert where(task.pk) == "mcptasks_task_default"
    assert Task.objects.get(pk=task.pk).state == TaskState.QUEUED
    # That day's partition cannot be attached over it: skipped with a warning, the task stays.
    assert task_partitions.ensure_partitions(31) == [
        f"mcptasks_task_p{(timezone.now() + timedelta(days=n)).astimezone(UTC):%Y%m%d}"
        for n in range(8, 32)
        if n != 30
    ]
    assert where(task.pk) == "mcptasks_task_default"


@pytest.mark.pg
@pytest.mark.django_db
def test_the_sweep_tries_whole_days_every_few_minutes(
    make_task: Callable[..., Task], days_ago: Callable[[int], tuple[str, datetime]]
) -> None:
    name, noon = days_ago(3)
    finished_at(make_task, noon)
    assert sweeps.purge_tasks() == 1
    assert name not in names()  # dropped whole
    second, _ = days_ago(4)
    assert sweeps.purge_tasks() == 0  # tried a moment ago
    assert second in names()


@pytest.mark.django_db
def test_the_partitions_command_lists_them_or_says_there_are_none() -> None:
    out = io.StringIO()
    call_command("task_partitions", "--ensure", stdout=out)
    if task_partitions.partitioned():
        assert "mcptasks_task_legacy\t- .. ~\t" in out.getvalue()
        assert "mcptasks_task_default\tDEFAULT\t" in out.getvalue()
    else:
        assert out.getvalue() == "tasks are one table here (SQLite): no partitions\n"
        assert (
            lifecycle.task_purge_days() == []
            and task_partitions.row_purge_below(timezone.now()) is None
        )


@pytest.mark.pg
@pytest.mark.django_db
def test_the_partitions_command_refuses_what_it_cannot_do(settings: Any) -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="--days-ahead must be 0 to 60"):
        call_command("task_partitions", "--ensure", "--days-ahead", "61", stdout=io.StringIO())
    settings.MCPTASKS_TASK_PARTITION_PURGE = False
    with pytest.raises(CommandError, match="MCPTASKS_TASK_PARTITION_PURGE is off"):
        call_command("task_partitions", "--purge", stdout=io.StringIO())
    settings.MCPTASKS_TASK_PARTITION_PURGE = True
    out = io.StringIO()
    call_command("task_partitions", "--purge", stdout=out)
    assert "dropped" not in out.getvalue()  # nothing due


@pytest.mark.pg
@pytest.mark.django_db
def test_a_hold_placed_during_the_drop_keeps_the_whole_day_as_it_was(
    make_task: Callable[..., Task],
    days_ago: Callable[[int], tuple[str, datetime]],
    cast: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The drop is checked again under its lock, in the transaction that deleted the dependent
    rows and recorded the purge events: refused there, none of it happened."""
    name, noon = days_ago(3)
    task = finished_at(make_task, noon)
    TaskStep.objects.create(task=task, key="now:1", kind="now", value=1)
    drop_day = task_partitions.drop_day

    def hold_then_drop(*args: Any, **kwargs: Any) -> int:
        assert AuditEvent.objects.filter(action="task.purged").exists()  # recorded already
        place_hold(tenant_slug=cast["alice"]["tenant"].slug, reason="subpoena", actor=SYSTEM)
        return drop_day(*args, **kwargs)

    monkeypatch.setattr(task_partitions, "drop_day", hold_then_drop)
    assert lifecycle.task_purge_days() == []
    assert name in names() and Task.objects.filter(pk=task.pk).exists()
    assert TaskStep.objects.filter(task_id=task.pk).count() == 1
    assert not AuditEvent.objects.filter(action="task.purged").exists()
    assert not AuditEvent.objects.filter(action="legal_hold.placed").exists()  # rolled back too
