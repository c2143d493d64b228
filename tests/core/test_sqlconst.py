"""mcptasks.sqlconst.written: a code constant written into a statement, so that a prepared
statement's generic plan stays as good as a custom one (issue 23)."""

from __future__ import annotations

from typing import Any

import pytest

from mcptasks.models import Task, TaskState
from mcptasks.sqlconst import written


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
