"""mcptasks.plans: a code constant written into a statement, so that a prepared statement's
generic plan stays as good as a custom one, and a search planned for its term however often a
connection runs it (issue 23)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from mcptasks.models import Task, TaskState
from mcptasks.plans import written


@pytest.mark.parametrize("value", ["", "Running", "running'; DROP TABLE x; --", "a b", "1st"])
def test_only_a_code_constant_is_written(value: str) -> None:
    with pytest.raises(ValueError, match="not a code constant"):
        written(value)


@pytest.mark.django_db
def test_a_written_state_filters_as_a_bound_one_would(make_task: Any) -> None:
    task = make_task()
    rows = Task.objects.filter(state=written(TaskState.QUEUED))
    sql, params = rows.query.sql_with_params()
    assert "('queued')" in sql and "queued" not in [str(p) for p in params]
    assert list(rows.values_list("pk", flat=True)) == [task.pk]
    assert not Task.objects.filter(state=written(TaskState.RUNNING)).exists()


@pytest.mark.pg
@pytest.mark.django_db
def test_the_navigations_stuck_cancel_count_reads_active_tasks_in_a_generic_plan(
    cast: dict[str, Any],
) -> None:
    """Counted on every dashboard page and prepared by a connection that runs it often: with
    its state bound, the generic plan could not prove the partial index of active tasks (and
    at a million tasks guessed a ninth of them running), so PostgreSQL planned the count
    afresh at every execution, over every day partition of the task table."""
    from django.db.models import Count

    from mcptasks.queries.waiting import _stuck_cancels
    from tests.generic_plans import generic_plan

    rows = _stuck_cancels(cast["olga"]["user"], None, None)
    counted = rows.order_by().values("tenant_id").annotate(n=Count("pk"))
    plan = generic_plan(*counted.query.sql_with_params())
    assert "active_tenant" in plan or "active_principal" in plan, plan


@pytest.mark.pg
@pytest.mark.django_db
def test_a_search_is_planned_for_its_term_however_often_it_runs(
    cast: dict[str, Any], make_task: Any
) -> None:
    """A connection prepares what it runs often; a prepared search's generic plan guesses an
    average term and scanned every task (1.2 s a page at a million tasks)."""
    from mcptasks import queries
    from mcptasks.conf import PREPARE_THRESHOLD

    task = make_task()
    filters = queries.TaskFilters(search="checkout")
    for _ in range(PREPARE_THRESHOLD + 5 + 3):
        queries.task_page(cast["olga"]["user"], filters)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE %s AND statement LIKE %s",
            ['SELECT "mcptasks_task"."id", %', "%search_summary%"],
        )
        plans = cursor.fetchall()
        cursor.execute("SHOW plan_cache_mode")
        after = cursor.fetchone()[0]
    assert plans and all(generic == 0 and custom > 5 for generic, custom in plans), plans
    assert after == "auto"  # the block's setting did not outlive it
    assert queries.task_page(cast["olga"]["user"], queries.TaskFilters(search=task.pk)).rows


@pytest.mark.pg
@pytest.mark.django_db
def test_planned_for_values_leaves_the_setting_as_it_found_it_inside_a_transaction() -> None:
    from django.db import transaction

    from mcptasks.plans import planned_for_values

    def mode() -> str:
        with connection.cursor() as cursor:
            cursor.execute("SHOW plan_cache_mode")
            return str(cursor.fetchone()[0])

    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        with planned_for_values():
            assert mode() == "force_custom_plan"
        assert mode() == "force_generic_plan"
        with pytest.raises(ZeroDivisionError), planned_for_values():
            1 / 0
        assert mode() == "force_generic_plan"
