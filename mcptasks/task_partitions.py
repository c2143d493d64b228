"""The day partitions of ``mcptasks_task`` on PostgreSQL (migration 0016, docs/operations.md
"Task partitions").

The table is partitioned by RANGE (``id``): a task id starts with its creation day
(:mod:`mcptasks.task_ids`), so ``mcptasks_task_pYYYYMMDD`` holds one day's tasks (UTC),
``mcptasks_task_legacy`` every task made before partitioning (ids below ``~``) and
``mcptasks_task_default`` whatever no other partition covers (it should stay empty).
:func:`ensure_partitions` creates today's partition and the next :data:`DAYS_AHEAD` days' (the
``SECURITY DEFINER`` function ``mcptasks_task_ensure_partitions``); it is idempotent and run by
the migration, the periodic sweep (:func:`ensure_due`, at most hourly per process) and
``manage.py task_partitions --ensure``.

The TTL purge (``MCPTASKS_TASK_PARTITION_PURGE``, on by default on PostgreSQL) drops a whole
day (:func:`mcptasks.lifecycle.task_purge_days`, through :func:`check_day` and
:func:`drop_day`) once the day has ended and every task of it is terminal, past its TTL
plus ``MCPTASKS_TERMINAL_GRACE_S``, unheld and with no undecided effect: each task still gets
its ``task.purged`` audit event, its dependent rows are deleted, and the partition is DETACHed
and DROPped, all in one transaction. The row-by-row purge (:func:`mcptasks.sweeps.purge_tasks`)
leaves a day alone while it may still be dropped whole — until the default TTL plus the grace
after its end (:func:`row_purge_below`) — and then purges whatever a blocker kept (a task still
running, held or with an unreconciled effect) row by row, as it does the legacy and DEFAULT
partitions. So a task is deleted no sooner than its TTL plus the grace, and with the partition
purge on, up to a day and the default TTL later. SQLite keeps one ordinary table: everything
here is a no-op there.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.db.models.lookups import StartsWith

from mcptasks.periodic import AtMostEvery
from mcptasks.task_ids import PREFIX, day_prefix, id_tail

log = logging.getLogger(__name__)

DAYS_AHEAD = 7  # partitions created ahead of today
ENSURE_EVERY_S = 3600.0  # how often the sweep asks, per process


@dataclass(frozen=True)
class Partition:
    """One partition: tasks with ``lower <= id < upper`` (None: unbounded)."""

    name: str
    lower: str | None
    upper: str | None
    is_default: bool

    @property
    def is_day(self) -> bool:
        return not self.is_default and self.lower is not None and self.upper is not None


def partitioned() -> bool:
    """Whether the tasks live in a partitioned table (PostgreSQL)."""
    return connection.vendor == "postgresql"


def partitions() -> list[Partition]:
    """The partitions, the legacy one first, then by day, the DEFAULT one last; empty on
    SQLite."""
    if not partitioned():
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, lower_bound, upper_bound, is_default FROM mcptasks_task_partitions()"
        )
        return [Partition(*row) for row in cursor.fetchall()]


def ensure_partitions(days_ahead: int = DAYS_AHEAD) -> list[str]:
    """Create the partitions of today and the ``days_ahead`` next days that do not exist yet;
    their names. A day whose tasks already went to the DEFAULT partition is skipped with a
    warning (they stay there)."""
    if not partitioned():
        return []
    with connection.cursor() as cursor:
        cursor.execute("SELECT mcptasks_task_ensure_partitions(%s)", [days_ahead])
        return [row[0] for row in cursor.fetchall()]


ensuring = AtMostEvery(ENSURE_EVERY_S)


def ensure_due() -> list[str]:
    """:func:`ensure_partitions`, at most every :data:`ENSURE_EVERY_S` in this process."""
    return ensuring.run(lambda: ensure_partitions(DAYS_AHEAD))


def attach_day(day: date) -> str:
    """Create and attach the partition of ``day`` as the table's owner; its name. For seeding
    a history (benchmarks, tests): the ensure function makes today's and later days' only."""
    name = f"mcptasks_task_p{day:%Y%m%d}"
    lower, upper = f"{PREFIX}{day:%Y%m%d}", f"{PREFIX}{day + timedelta(days=1):%Y%m%d}"
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {name} (LIKE mcptasks_task INCLUDING DEFAULTS)")
        cursor.execute(
            f"ALTER TABLE mcptasks_task ATTACH PARTITION {name}"
            f" FOR VALUES FROM ('{lower}') TO ('{upper}')"
        )
    return name


def purging() -> bool:
    """Whether the TTL purge drops whole days (PostgreSQL, ``MCPTASKS_TASK_PARTITION_PURGE``)."""
    return partitioned() and bool(settings.MCPTASKS_TASK_PARTITION_PURGE)


def row_purge_below(now: datetime) -> str | None:
    """The ids the row-by-row purge may delete are below this (None: all of them). A day's
    partition waits for its whole-day purge until the default TTL plus the grace after its
    end; the days before are purged row by row of whatever kept them."""
    if not purging():
        return None
    from mcptasks.models import terminal_grace

    wait = timedelta(milliseconds=settings.MCPTASKS_DEFAULT_TTL_MS) + terminal_grace()
    return day_prefix(now - wait)


def days_to_purge(now: datetime) -> list[Partition]:
    """The ended days' partitions, oldest first: what the whole-day purge tries
    (:func:`mcptasks.lifecycle.task_purge_days`)."""
    today = day_prefix(now)
    return [part for part in partitions() if part.is_day and str(part.upper) <= today]


def check_day(part: Partition, cutoff: datetime) -> None:
    """Raise (a :class:`DatabaseError`) unless every task of the day ``part`` is terminal,
    past its TTL before ``cutoff``, unheld and with no undecided effect. No lock: the purge
    checks again as it drops (:func:`drop_day`)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT mcptasks_task_partition_purge(%s, %s, false)", [part.name, cutoff])


def drop_day(part: Partition, cutoff: datetime) -> int:
    """Check the day ``part`` again, under a lock, then detach and drop it; how many tasks it
    held. Raises as :func:`check_day` does, and then drops nothing. In the caller's
    transaction, once nothing points at its tasks."""
    with connection.cursor() as cursor:
        # The foreign keys' deferred checks, now: a table with checks pending cannot be dropped.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("SELECT mcptasks_task_partition_purge(%s, %s, true)", [part.name, cutoff])
        return int(cursor.fetchone()[0])


ID_SEARCH_CANDIDATES = 50  # a fragment of six or more random characters matches one task or none


def id_search(term: str) -> Q:
    """Tasks whose id starts with ``term``, or whose id does after its day prefix — what the
    dashboard shows of a task id (:func:`mcptasks.task_ids.distinctive`). The latter are read
    first, from the index ``task_id_tail`` (one range per partition), and named by id: within
    the listing's other conditions the planner would guess that many tasks match and scan them
    all in the page's order."""
    from mcptasks.models import Task

    found = Q(pk__startswith=term)
    if term.startswith(PREFIX):
        return found
    tails = Task.objects.filter(Q(pk__gte=PREFIX) & Q(StartsWith(id_tail(), term)))
    ids = list(tails.values_list("pk", flat=True)[:ID_SEARCH_CANDIDATES])
    return found | Q(pk__in=ids) if ids else found


def sizes() -> list[tuple[Partition, int]]:
    """Each partition with how many tasks it holds (counts every row: for operators)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text, count(*) FROM mcptasks_task GROUP BY 1")
        counts = dict(cursor.fetchall())
    return [(part, int(counts.get(part.name, 0))) for part in partitions()]
