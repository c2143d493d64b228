"""How the statements are planned on PostgreSQL (issue 23): code constants written into a
statement instead of bound to it, and the statements whose plan must follow their values.

Values are bound server-side and a statement a connection runs often is prepared
(:func:`mcptasks.conf.postgres_database`); after five executions PostgreSQL weighs a generic
plan, made without the values, against planning for each. A bound ``state`` makes the generic
plan blind: it cannot prove a partial index's condition (``state = 'running'`` inside the
active states) nor see that a state is rare, so it looks worse and every execution is planned
afresh — over every day partition of the task table, the most expensive part of a dashboard
page's query at a million tasks (``bench/PROFILE-23.md``). A state the code chose, written as
a literal, keeps the generic plan as good as a custom one.

The other way round, a value the user typed can decide the plan: a search term that matches a
handful of tasks is cheap through its indexes, and a generic plan, guessing the average term,
scans. :func:`planned_for_values` keeps such statements off their generic plans.

And a statement that finds one task by its id is better on its generic plan than PostgreSQL
judges: :func:`generic_plans` keeps it there.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection, transaction
from django.db.models import CharField
from django.db.models.expressions import RawSQL

_WORD = re.compile(r"[a-z][a-z_]*")


def written(value: str) -> RawSQL:
    """``value``, a choice of a model field (lower-case letters and underscores), as a SQL
    literal for a filter: ``Q(state=written(TaskState.RUNNING))``. Never for input: anything
    else is refused."""
    return RawSQL(literal(value), [], output_field=CharField())  # noqa: S611 - checked by literal


def literal(value: str) -> str:
    """``value``, a choice of a model field, as a SQL string literal for a statement written by
    hand (see :func:`written`)."""
    if not _WORD.fullmatch(value):
        raise ValueError(f"not a code constant: {value!r}")
    return f"'{value}'"


@contextmanager
def planned_for_values() -> Iterator[None]:
    """The block's statements planned for their values at each execution, never from a
    prepared statement's generic plan (``plan_cache_mode``, for the block's transaction or
    savepoint only). For a page whose queries carry what the user typed: the dashboard's search
    at a million tasks took 1.2 s a page on its generic plans, 80 ms planned for its term."""
    if connection.vendor != "postgresql":
        yield
        return
    with _plan_cache_mode("force_custom_plan"):
        yield


@contextmanager
def generic_plans() -> Iterator[None]:
    """The block's prepared statements run on their generic plans: a transaction (or savepoint)
    for statements that find one task by its id. Their generic plan prunes the task table's
    partitions when it runs, as good as planning for the id; but PostgreSQL costs it as if it
    read every partition, so left to choose it planned each execution afresh — half a
    millisecond of the worker's claim (``bench/PROFILE-23.md``). Only where prepared statements
    are (behind a pooler none is: the block is a plain transaction)."""
    if connection.vendor != "postgresql" or not _prepares():
        with transaction.atomic():
            yield
        return
    with _plan_cache_mode("force_generic_plan"):
        yield


@contextmanager
def _plan_cache_mode(mode: str) -> Iterator[None]:
    """``plan_cache_mode`` = ``mode`` in a transaction or savepoint for the block (PostgreSQL).
    Set for the transaction (``SET LOCAL``): a block that opens it leaves it to its end; one
    inside another restores what it found."""
    outermost = not connection.in_atomic_block
    with transaction.atomic(), connection.cursor() as cursor:
        before = None
        if not outermost:
            cursor.execute("SHOW plan_cache_mode")
            before = cursor.fetchone()[0]
        cursor.execute(f"SET LOCAL plan_cache_mode = {mode}")
        yield
        # (a block that raised is rolled back, and the setting with it)
        if before is not None:
            cursor.execute("SELECT set_config('plan_cache_mode', %s, true)", [before])


def _prepares() -> bool:
    """Whether the connection prepares the statements it runs often (none behind a pooler:
    :func:`mcptasks.conf.postgres_database`)."""
    return connection.settings_dict.get("OPTIONS", {}).get("prepare_threshold") is not None
