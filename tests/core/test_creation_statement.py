"""A creation on PostgreSQL with events sealed after commit is one statement (issue 23): the
active-task limits, the task row and its ``task.created`` audit event, one round trip and one
transaction. What it writes is what the transaction path writes; what it refuses writes
nothing; where it cannot be one statement the transaction path runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from audit import seal
from audit.chain import verify_chain
from audit.models import AuditEvent
from audit.record import Actor
from mcptasks import lifecycle
from mcptasks.lifecycle import creation
from mcptasks.models import Task, TaskCreationKey
from mcptasks.outbox import subscriptions
from tests.generic_plans import generic_plan

pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


def _spec(entry: dict[str, Any], **options: Any) -> lifecycle.NewTask:
    return lifecycle.NewTask(
        tenant_id=entry["tenant"].pk,
        principal_id=entry["user"].pk,
        tool_name="echo_task",
        arguments=options.pop("arguments", {"message": "hi", "api_key": "s3cret"}),
        policy_revision="test",
        tenant=entry["tenant"],
        sensitive_keys=frozenset({"api_key"}),
        **options,
    )


def _create(entry: dict[str, Any], **options: Any) -> Task:
    task, created = lifecycle.task_create(
        spec=_spec(entry, **options), actor=Actor.for_user(entry["user"], kind="principal")
    )
    assert created
    return task


def _event_of(task: Task) -> AuditEvent:
    [event] = AuditEvent.objects.filter(task_id=task.pk)
    return event


def _as_written(event: AuditEvent) -> dict[str, Any]:
    return {
        field: getattr(event, field)
        for field in ("chain", "tenant_id", "actor_kind", "actor_id", "actor_display", "action")
    } | {"data": event.data}


def test_a_creation_is_one_statement_with_its_audit_event(
    cast: dict[str, dict[str, Any]], sealed_later: None
) -> None:
    subscriptions.for_tenant(cast["alice"]["tenant"].pk)  # read once per cache period
    with CaptureQueriesContext(connection) as queries:
        task = _create(cast["alice"])
    [statement] = queries.captured_queries
    assert 'INSERT INTO "mcptasks_task"' in statement["sql"]
    assert 'INSERT INTO "audit_auditevent"' in statement["sql"]
    stored = Task.objects.get(pk=task.pk)
    assert (stored.state, stored.tool_name, stored.arguments) == (
        "queued",
        "echo_task",
        {"message": "hi", "api_key": "s3cret"},
    )
    event = _event_of(task)
    assert event.action == "task.created" and event.seq is None  # sealed after commit
    assert event.data["arguments"]["api_key"] != "s3cret"  # redacted as record() redacts


def test_the_one_statement_writes_what_the_transaction_writes(
    cast: dict[str, dict[str, Any]], sealed_later: None
) -> None:
    alice = cast["alice"]
    fused = _create(alice)
    with transaction.atomic():  # a caller's transaction: the transaction path
        assert connection.in_atomic_block
        classic = _create(alice)
    assert _as_written(_event_of(fused)) == _as_written(_event_of(classic))
    columns = [f.attname for f in Task._meta.concrete_fields if f.attname not in {"id"}]
    ignored = {"created_at", "updated_at", "correlation_id", "traceparent"}
    left = Task.objects.filter(pk=fused.pk).values(*columns).get()
    right = Task.objects.filter(pk=classic.pk).values(*columns).get()
    assert {k: v for k, v in left.items() if k not in ignored} == {
        k: v for k, v in right.items() if k not in ignored
    }


def test_the_events_of_one_statement_creations_are_sealed_into_a_valid_chain(
    cast: dict[str, dict[str, Any]], sealed_later: None
) -> None:
    tasks = [_create(cast["alice"]) for _ in range(3)]
    seal.seal_pending()
    events = list(AuditEvent.objects.filter(task_id__in=[t.pk for t in tasks]).order_by("seq"))
    assert [e.seq is not None for e in events] == [True, True, True]
    report = verify_chain(events[0].chain)
    assert report.broken is None and report.unsealed == 0, report


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("MCPTASKS_MAX_ACTIVE_TASKS_PER_PRINCIPAL", "for this principal"),
        ("MCPTASKS_MAX_ACTIVE_TASKS_PER_TENANT", "for this tenant"),
    ],
)
def test_a_creation_past_a_limit_writes_neither_task_nor_event(
    cast: dict[str, dict[str, Any]], sealed_later: None, settings: Any, setting: str, named: str
) -> None:
    setattr(settings, setting, 1)
    _create(cast["alice"])
    with (
        CaptureQueriesContext(connection) as queries,
        pytest.raises(lifecycle.LimitExceeded, match=named),
    ):
        _create(cast["alice"])
    assert len(queries.captured_queries) == 1
    assert Task.objects.count() == 1
    assert AuditEvent.objects.filter(action="task.created").count() == 1


def test_a_keyed_creation_takes_the_transaction_path_with_its_key(
    cast: dict[str, dict[str, Any]], sealed_later: None
) -> None:
    with CaptureQueriesContext(connection) as queries:
        task = _create(cast["alice"], creation_key="k-1")
    assert len(queries.captured_queries) > 1  # the unique key lives in its own table
    assert TaskCreationKey.objects.get(key="k-1").task_id == task.pk
    assert _event_of(task).action == "task.created"


def test_a_creation_key_race_lost_in_the_transaction_returns_the_winner(
    cast: dict[str, dict[str, Any]], sealed_later: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = cast["alice"]
    winner = _create(alice, creation_key="k-1")
    looked_up = creation._existing_for_key
    calls: list[int] = []

    def first_misses(spec: lifecycle.NewTask, now: Any) -> Task | None:
        calls.append(1)
        return None if len(calls) == 1 else looked_up(spec, now)  # the race: not there yet

    monkeypatch.setattr(creation, "_existing_for_key", first_misses)
    task, created = lifecycle.task_create(
        spec=_spec(alice, creation_key="k-1"), actor=Actor.system("test")
    )
    assert (task.pk, created) == (winner.pk, False)
    assert Task.objects.count() == 1 and TaskCreationKey.objects.count() == 1
    assert AuditEvent.objects.filter(action="task.created").count() == 1


def test_a_tenant_with_outbox_subscriptions_gets_its_rows_in_the_transaction(
    cast: dict[str, dict[str, Any]], sealed_later: None, subscribe: Callable[..., Any]
) -> None:
    from mcptasks.outbox.models import Delivery

    subscribe(cast["alice"]["tenant"], ["task.created"])
    with CaptureQueriesContext(connection) as queries:
        task = _create(cast["alice"])
    assert len(queries.captured_queries) > 1  # the transaction path, with the outbox's rows
    assert Delivery.objects.filter(tenant=cast["alice"]["tenant"]).count() == 1
    assert _event_of(task).action == "task.created"


def test_inline_sealing_keeps_the_transaction_and_seals_at_once(
    cast: dict[str, dict[str, Any]], settings: Any
) -> None:
    settings.MCPTASKS_AUDIT_SEAL_DELAY_MS = 0
    task = _create(cast["alice"])
    assert _event_of(task).seq is not None


def test_a_creation_with_autocommit_off_takes_the_transaction_path(
    cast: dict[str, dict[str, Any]], sealed_later: None
) -> None:
    transaction.set_autocommit(False)
    try:
        task = _create(cast["alice"])
        transaction.commit()
    finally:
        transaction.set_autocommit(True)
    assert Task.objects.filter(pk=task.pk).exists()
    assert _event_of(task).action == "task.created"


def test_the_active_counts_use_their_partial_indexes_in_a_generic_plan(
    cast: dict[str, dict[str, Any]],
) -> None:
    """A connection prepares what it runs often (mcptasks.conf); the counts' generic plan — no
    parameter values known — still reads the partial indexes of active tasks, so a principal's
    count never scans the tasks it has finished."""
    values = creation._count_params(_spec(cast["alice"]))
    plan = generic_plan(creation._active_counts_sql(), values)
    assert "task_active_principal" in plan, plan
    assert "task_active_tenant" in plan, plan
