"""mcptasks.plans: a code constant written into a statement, so that a prepared statement's
generic plan stays as good as a custom one, a search planned for its term however often a
connection runs it, and the worker's claim and the fast tasks/get on their generic plans
(issue 23)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from mcptasks.models import Task, TaskState
from mcptasks.plans import generic_plans, planned_for_values, written


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


def _inbox_statements(user: Any) -> dict[str, Any]:
    from mcptasks import access

    pending = access.answerable_inputs_before_gates(user)
    return {
        "answerable requests": pending.select_related("task").order_by("created_at", "pk"),
        "unknown effects": access.reconcilable_effects(user).select_related("task"),
    }


@pytest.mark.pg
@pytest.mark.django_db
@pytest.mark.parametrize(
    "who, statement",
    [
        ("olga", "answerable requests"),
        ("adam", "answerable requests"),  # a member: by delegation or as the principal
        ("olga", "unknown effects"),  # (a member reconciles none: adam has no such statement)
    ],
)
def test_the_inbox_knows_its_states_in_its_generic_plans(
    who: str, statement: str, cast: dict[str, Any]
) -> None:
    """The inbox's lists and every page's answerable count are prepared by the connections that
    run them: with ``pending``, the audiences and ``unknown`` bound, their generic plans could
    not tell the few pending requests from the many answered ones and looked costlier than
    planning each execution, so at a million tasks each page planned them afresh (with the
    join to the task table's day partitions, 3-4 ms apiece)."""
    from tests.generic_plans import generic_plan

    rows = _inbox_statements(cast[who]["user"])[statement]
    plan = generic_plan(*rows.query.sql_with_params())
    if statement == "unknown effects":
        assert "state)::text = 'unknown'" in plan, plan
    else:
        assert "state)::text = 'pending'" in plan, plan
        assert "'operator'" in plan and "'any'" in plan, plan


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


def _plan_cache_mode() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW plan_cache_mode")
        return str(cursor.fetchone()[0])


def _plans_of(*fragments: str) -> list[tuple[int, int]]:
    """(generic, custom) plans of the connection's prepared statements holding every fragment."""
    where = " AND ".join(["statement LIKE %s"] * len(fragments))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE {where}",
            [f"%{fragment}%" for fragment in fragments],
        )
        return list(cursor.fetchall())


@pytest.mark.pg
@pytest.mark.django_db
@pytest.mark.parametrize(
    ("block", "inside"),
    [(planned_for_values, "force_custom_plan"), (generic_plans, "force_generic_plan")],
)
def test_a_plan_setting_is_left_as_found_inside_a_transaction(block: Any, inside: str) -> None:
    from django.db import transaction

    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            cursor.execute("SET LOCAL plan_cache_mode = auto")
        with block():
            assert _plan_cache_mode() == inside
        assert _plan_cache_mode() == "auto"
        with pytest.raises(ZeroDivisionError), block():
            assert _plan_cache_mode() == inside
            1 / 0
        assert _plan_cache_mode() == "auto"


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_a_plan_setting_opened_with_its_transaction_ends_with_it() -> None:
    with generic_plans():
        assert _plan_cache_mode() == "force_generic_plan"
    assert _plan_cache_mode() == "auto"


@pytest.mark.pg
@pytest.mark.django_db
def test_without_prepared_statements_generic_plans_is_a_plain_transaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Behind a pooler nothing is prepared (mcptasks.conf): the setting would buy nothing."""
    options = {**connection.settings_dict["OPTIONS"], "prepare_threshold": None}
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", options)
    with generic_plans():
        assert connection.in_atomic_block
        assert _plan_cache_mode() == "auto"


@pytest.mark.pg
@pytest.mark.django_db
def test_a_claim_finds_its_task_on_generic_plans_however_often_it_runs(make_task: Any) -> None:
    """Left to choose, PostgreSQL costs a by-id statement's generic plan as if it read every
    day partition of the task table, and planned each claim afresh."""
    from mcptasks import lifecycle
    from mcptasks.conf import PREPARE_THRESHOLD

    for _ in range(PREPARE_THRESHOLD + 3):
        lifecycle.task_claim(task_id=make_task().pk, worker="w")
    locks = _plans_of("FOR NO KEY UPDATE OF n, u")
    claims = _plans_of("WITH moved AS (UPDATE")
    assert locks and claims
    assert all(generic >= 3 and custom == 0 for generic, custom in locks + claims), locks + claims
    assert _plan_cache_mode() == "auto"


@pytest.mark.pg
@pytest.mark.django_db
def test_the_fast_tasks_get_polls_on_its_generic_plan(make_task: Any) -> None:
    """Its one statement joins the token to the task: planned afresh at every poll, 0.4 ms of
    PostgreSQL's CPU; on the generic plan, 0.14 ms."""
    import psycopg

    from mcptasks.mcp.fast_get import connection_params, plan

    task = make_task()
    with psycopg.connect(**connection_params()) as polling:
        for _ in range(3):
            polling.execute(plan().statement, plan().params("nosuchtoken", task.pk)).fetchall()
        plans = polling.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE %s",
            ["%mcptasks_apitoken%"],
        ).fetchall()
    assert plans == [(3, 0)], plans


def test_behind_a_pooler_the_fast_tasks_get_sets_nothing_on_its_connections(
    settings: Any,
) -> None:
    from mcptasks.mcp.fast_get import connection_params

    settings.MCPTASKS_DB_POOLER = "pgbouncer"
    settings.MCPTASKS_FAST_TASKS_GET_PREPARE = True
    assert "plan_cache_mode" not in connection_params().get("options", "")


@pytest.mark.pg
@pytest.mark.django_db
def test_the_claims_running_count_knows_its_state_in_its_generic_plan() -> None:
    """The claim runs on generic plans (generic_plans): with the state bound, the count's plan
    would be made for an average state's share of the tasks, not for the few running ones."""
    from mcptasks.fairshare import _running_statement
    from tests.generic_plans import generic_plan

    plan = generic_plan(_running_statement(), [1, 1])
    assert "(state)::text = 'running'::text" in plan, plan


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_the_operations_figures_run_on_their_generic_plans_however_often_they_run(
    make_task: Any,
) -> None:
    """The operations page and /metrics (mcptasks.operations.snapshot): with a bound timestamp
    PostgreSQL could not cost the lease and last-hour queries' generic plans and planned them at
    every request, 1 ms apiece at 100,000 tasks (``bench/operations_timing.py``)."""
    from mcptasks import operations
    from mcptasks.conf import PREPARE_THRESHOLD

    make_task()
    for _ in range(PREPARE_THRESHOLD + 5 + 3):
        operations.snapshot()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE %s AND (statement LIKE %s OR statement LIKE %s)",
            ['%"mcptasks_task"%', '%lease_expires_at" < %', '%updated_at" >= %'],
        )
        plans = cursor.fetchall()
        cursor.execute("SHOW plan_cache_mode")
        after = cursor.fetchone()[0]
    assert len(plans) == 2, plans
    assert all(generic > 0 and custom == 0 for _, generic, custom in plans), plans
    assert after == "auto"  # the snapshot's setting did not outlive it


@pytest.mark.pg
@pytest.mark.django_db
def test_the_active_task_count_of_metrics_knows_its_states_in_its_generic_plan() -> None:
    """/metrics counts the active states at every scrape: written in, their generic plan reads
    the rows in those states through an index, however many ended tasks the table holds."""
    from tests.generic_plans import generic_plan

    captured: list[tuple[str, Any]] = []

    def capture(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        captured.append((sql, params))
        return execute(sql, params, many, context)

    from mcptasks import metrics

    with connection.execute_wrapper(capture):
        list(metrics.DatabaseCollector().collect())
    (sql, params), *_ = [(s, p) for s, p in captured if "'awaiting_input'" in s]
    plan = generic_plan(sql, params or ())
    from mcptasks.models import ACTIVE_STATES

    states = ",".join(sorted(ACTIVE_STATES))
    assert f"state)::text = ANY ('{{{states}}}'" in plan and "Index" in plan, plan
