"""A move's UPDATE is compiled by the ORM once per process for its shape, then bound without it
(lifecycle._core.UpdatePlan; issue 23): the same statement and parameters as the ORM's, and the
same refusals."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import Q
from django.utils import timezone

from audit.record import Actor
from mcptasks import lifecycle
from mcptasks.lifecycle import _core
from mcptasks.models import Task, TaskState

pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def compiles(monkeypatch):
    """The statements the ORM compiled for moves (each plan's first use, and unplanned moves)."""
    compiled: list[str] = []
    original = _core._bare_update

    def spy(rows, values):
        sql, params = original(rows, values)
        compiled.append(sql)
        return sql, params

    monkeypatch.setattr(_core, "_bare_update", spy)
    monkeypatch.setattr(_core, "_update_plans", {})
    return compiled


def _claim_and_complete(task_id: str) -> Task:
    task = lifecycle.task_claim(task_id=task_id, worker="w")
    return lifecycle.task_complete(
        task_id=task_id, attempt=task.attempt, result={"content": [], "isError": False}
    )


def test_claim_and_complete_compile_once_per_process(make_task, compiles):
    first, second = make_task("alice"), make_task("alice")
    _claim_and_complete(first.pk)
    assert len(compiles) == 2  # the claim's and the completion's plans
    done = _claim_and_complete(second.pk)
    assert len(compiles) == 2  # bound, not compiled again
    assert all(plan is not None for plan in _core._update_plans.values())
    row = Task.objects.select_related("tenant").get(pk=second.pk)
    assert (done.state, done.attempt, done.version) == (TaskState.COMPLETED, 1, row.version)
    assert (done.result, done.lease_owner, done.lease_expires_at) == (row.result, "", None)
    assert done.status_message == row.status_message == "Completed"
    assert done.tenant == row.tenant and done.tenant.slug == row.tenant.slug


def test_a_planned_claim_sets_the_lease_by_the_database_clock(make_task, compiles):
    make_task("alice")  # a first claim builds the plan
    _claim_and_complete(Task.objects.get().pk)
    task = make_task("alice")
    before = timezone.now()
    claimed = lifecycle.task_claim(task_id=task.pk, worker="w2")
    assert len(compiles) == 2
    assert claimed.lease_owner == "w2" and claimed.attempt == 1
    assert claimed.lease_expires_at is not None
    assert claimed.lease_expires_at > before + timedelta(seconds=1)
    assert Task.objects.get(pk=task.pk).lease_expires_at == claimed.lease_expires_at


def test_a_planned_move_of_a_stale_attempt_is_refused(make_task, compiles):
    task = make_task("alice")
    _claim_and_complete(make_task("alice").pk)
    claimed = lifecycle.task_claim(task_id=task.pk, worker="w")
    with pytest.raises(lifecycle.StaleAttempt):
        lifecycle.task_complete(task_id=task.pk, attempt=claimed.attempt + 1, result={})
    with pytest.raises(lifecycle.InvalidTransition):
        lifecycle.task_claim(task_id=task.pk, worker="w")  # running: not queued
    assert Task.objects.get(pk=task.pk).state == TaskState.RUNNING


def test_each_set_of_fields_is_its_own_plan(make_task, compiles):
    task = make_task("alice")
    claimed = lifecycle.task_claim(task_id=task.pk, worker="w")
    lifecycle.task_fail(
        task_id=task.pk,
        attempt=claimed.attempt,
        actor=Actor.system("worker"),
        error=lifecycle.error_object("boom"),
        failure={"error_class": "ValueError"},
    )
    other = make_task("alice")
    claimed = lifecycle.task_claim(task_id=other.pk, worker="w")
    failed = lifecycle.task_fail(
        task_id=other.pk,
        attempt=claimed.attempt,
        actor=Actor.system("worker"),
        error=lifecycle.error_object("bang"),
    )
    assert failed.error is not None
    assert (failed.state, failed.error["message"], failed.failure) == (
        TaskState.FAILED,
        "bang",
        Task.objects.get(pk=other.pk).failure,
    )
    assert Task.objects.get(pk=task.pk).failure == {"error_class": "ValueError"}
    assert len(compiles) == 3  # one claim shape, two fail shapes (with and without failure)


def test_a_move_with_a_condition_is_compiled_each_time(make_task, compiles):
    task = make_task("alice")
    claimed = lifecycle.task_claim(task_id=task.pk, worker="w")
    moved = _core._apply(
        task.pk,
        verb="fail",
        target=TaskState.FAILED,
        fence=claimed.attempt,
        where=Q(lease_owner="w"),
        error=lifecycle.error_object("stop"),
    )
    assert moved.state == TaskState.FAILED
    assert len(_core._update_plans) == 1  # the claim's
    assert len(compiles) == 2  # the claim's plan, the conditional move


def test_a_plan_whose_parameters_differ_from_the_orms_is_not_used(make_task, compiles, monkeypatch):
    """The plan is checked against the ORM's parameters when it is built."""
    task = make_task("alice")
    monkeypatch.setattr(_core, "_comparable", lambda param: object())  # nothing matches
    claimed = lifecycle.task_claim(task_id=task.pk, worker="w")
    assert claimed.state == TaskState.RUNNING
    assert list(_core._update_plans.values()) == [None]
    lifecycle.task_complete(task_id=task.pk, attempt=claimed.attempt, result={})
    assert len(compiles) == 4  # each move: the refused plan's check, then the ORM's own


def test_a_null_and_a_value_of_one_field_are_two_plans(make_task, compiles):
    task = make_task("alice")
    claimed = lifecycle.task_claim(task_id=task.pk, worker="w")
    later = timezone.now() + timedelta(hours=1)
    for lease in (None, later, None, later):
        moved = _core._apply(
            task.pk,
            verb="report",
            target=TaskState.RUNNING,
            fence=claimed.attempt,
            status_message="working",
            lease_expires_at=lease,
        )
        assert moved.lease_expires_at == lease
        assert Task.objects.get(pk=task.pk).lease_expires_at == lease
    assert moved.search_status == Task.objects.get(pk=task.pk).search_status
    assert len(compiles) == 3  # the claim, the report with a NULL lease, with a lease
