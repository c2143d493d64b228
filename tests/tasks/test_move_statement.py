"""A worker's claim and completion each insert their audit event in the move's own statement on
PostgreSQL with events sealed after commit (issue 23): the completion is then one statement and
needs no transaction of its own; the claim's transaction loses one round trip. The event is the
one the transaction path records; a refused move writes no event; where the statement cannot
carry the event (an outbox subscription, inline sealing, the tenant unknown) the transaction
path runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from audit import seal
from audit.chain import verify_chain
from audit.models import AuditEvent
from mcptasks import lifecycle
from mcptasks.models import Task
from mcptasks.outbox import subscriptions

pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]

WORKER = "worker-1"


def _events(task: Task, action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(task_id=task.pk, action=action).order_by("id"))


def _complete(task: Task, *, tenant: bool = True, attempt: int | None = None) -> Task:
    return lifecycle.task_complete(
        task_id=task.pk,
        attempt=task.attempt if attempt is None else attempt,
        result={"content": [], "isError": False},
        rejected=False,
        tenant=task.tenant if tenant else None,
    )


def test_a_claim_inserts_its_event_in_the_claims_update_with_the_new_attempt(
    make_task: Callable[..., Task], sealed_later: None
) -> None:
    task = make_task()
    subscriptions.for_tenant(task.tenant_id)  # read once per cache period
    with CaptureQueriesContext(connection) as queries:
        claimed = lifecycle.task_claim(task_id=task.pk, worker=WORKER)
    [move] = [q["sql"] for q in queries.captured_queries if 'UPDATE "mcptasks_task"' in q["sql"]]
    assert 'INSERT INTO "audit_auditevent"' in move
    assert not [q for q in queries.captured_queries if q["sql"].startswith("INSERT")]
    [started] = _events(task, "task.started")
    assert (
        started.data
        == {"state": "running", "attempt": 1}
        == {
            "state": claimed.state,
            "attempt": claimed.attempt,
        }
    )
    assert started.seq is None  # sealed after commit
    # Requeued and claimed again: the event names the new attempt, read from the moved row.
    Task.objects.filter(pk=task.pk).update(state="queued")
    lifecycle.task_claim(task_id=task.pk, worker=WORKER)
    assert [e.data["attempt"] for e in _events(task, "task.started")] == [1, 2]


def test_a_completion_with_its_tenant_known_is_one_statement(
    make_task: Callable[..., Task], sealed_later: None
) -> None:
    task = lifecycle.task_claim(task_id=make_task().pk, worker=WORKER)
    subscriptions.for_tenant(task.tenant_id)
    with CaptureQueriesContext(connection) as queries:
        done = _complete(task)
    [statement] = queries.captured_queries
    assert 'INSERT INTO "audit_auditevent"' in statement["sql"]
    assert (done.state, done.lease_owner) == ("completed", "")
    [completed] = _events(task, "task.completed")
    assert completed.data == {"state": "completed", "is_error": False}


def test_the_one_statement_records_what_the_transaction_records(
    make_task: Callable[..., Task], sealed_later: None
) -> None:
    fused = lifecycle.task_claim(task_id=make_task().pk, worker=WORKER)
    classic = lifecycle.task_claim(task_id=make_task().pk, worker=WORKER)
    _complete(fused)
    _complete(classic, tenant=False)  # the tenant unknown: the transaction path

    def written(task: Task) -> list[tuple[Any, ...]]:
        return [
            (e.action, e.chain, e.tenant_id, e.actor_kind, e.actor_display, e.data)
            for e in AuditEvent.objects.filter(task_id=task.pk).order_by("id")
        ]

    assert written(fused) == written(classic)
    assert [e[0] for e in written(fused)] == ["task.created", "task.started", "task.completed"]


def test_a_fenced_off_completion_writes_no_event(
    make_task: Callable[..., Task], sealed_later: None
) -> None:
    task = lifecycle.task_claim(task_id=make_task().pk, worker=WORKER)
    with pytest.raises(lifecycle.StaleAttempt):
        _complete(task, attempt=task.attempt + 1)
    assert Task.objects.get(pk=task.pk).state == "running"
    assert _events(task, "task.completed") == []


def test_moves_with_events_in_their_statements_seal_into_a_valid_chain(
    make_task: Callable[..., Task], sealed_later: None
) -> None:
    tasks = [lifecycle.task_claim(task_id=make_task().pk, worker=WORKER) for _ in range(3)]
    for task in tasks:
        _complete(task)
    seal.seal_pending()
    report = verify_chain(f"tenant:{tasks[0].tenant.slug}")
    assert report.broken is None and report.unsealed == 0, report
    assert report.events == 9


def test_a_tenant_with_outbox_subscriptions_gets_its_rows_with_the_completion(
    make_task: Callable[..., Task], sealed_later: None, subscribe: Callable[..., Any]
) -> None:
    from mcptasks.outbox.models import Delivery

    task = lifecycle.task_claim(task_id=make_task().pk, worker=WORKER)
    subscribe(task.tenant, ["task.completed"])
    _complete(task)
    assert Delivery.objects.filter(tenant=task.tenant).count() == 1
    assert len(_events(task, "task.completed")) == 1


def test_inline_sealing_keeps_the_transaction_and_seals_at_once(
    make_task: Callable[..., Task], settings: Any
) -> None:
    settings.MCPTASKS_AUDIT_SEAL_DELAY_MS = 0
    task = lifecycle.task_claim(task_id=make_task().pk, worker=WORKER)
    _complete(task)
    assert all(e.seq is not None for e in AuditEvent.objects.filter(task_id=task.pk))


def test_a_completions_event_takes_the_chain_of_the_tenants_slug_as_the_move_reads_it(
    make_task: Callable[..., Task], sealed_later: None
) -> None:
    task = lifecycle.task_claim(task_id=make_task().pk, worker=WORKER)
    stale = task.tenant.slug
    type(task.tenant).objects.filter(pk=task.tenant_id).update(slug="acme-renamed")
    assert task.tenant.slug == stale  # the runner's copy, read at the claim
    done = _complete(task)
    [completed] = _events(task, "task.completed")
    assert completed.chain == "tenant:acme-renamed" != f"tenant:{stale}"
    assert done.tenant.slug == "acme-renamed"
