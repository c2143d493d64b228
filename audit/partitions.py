"""The monthly partitions of ``audit_auditevent`` on PostgreSQL (migration 0008, docs/audit.md).

The table is partitioned by RANGE (``created_at``): ``audit_auditevent_legacy`` holds what was
recorded before partitioning, ``audit_auditevent_pYYYYMM`` one calendar month (UTC) each, and
``audit_auditevent_default`` whatever no other partition covers (it should stay empty).
:func:`ensure_partitions` creates the current month's partition and the next
:data:`MONTHS_AHEAD` months' (the ``SECURITY DEFINER`` function ``audit_ensure_partitions``:
the application's role may call it, not create tables); it is idempotent, and run by the
migration, by the periodic sweep (:func:`ensure_due`, at most hourly per process) and by
``manage.py audit_partitions --ensure``. Retention drops whole partitions
(:func:`audit.retention.purge_due`). SQLite keeps one ordinary table: everything here is a
no-op there.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from mcptasks.periodic import AtMostEvery

MONTHS_AHEAD = 3  # partitions created ahead of the current month
ENSURE_EVERY_S = 3600.0  # how often the sweep asks, per process


@dataclass(frozen=True)
class Partition:
    """One partition: events with ``lower <= created_at < upper`` (None: unbounded)."""

    name: str
    lower: datetime | None
    upper: datetime | None
    is_default: bool


def partitioned() -> bool:
    """Whether the audit events live in a partitioned table (PostgreSQL)."""
    return connection.vendor == "postgresql"


def partitions() -> list[Partition]:
    """The partitions, oldest first, the DEFAULT one last; empty on SQLite."""
    if not partitioned():
        return []
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, lower_bound, upper_bound, is_default FROM audit_partitions()")
        return [Partition(*row) for row in cursor.fetchall()]


def ensure_partitions(months_ahead: int = MONTHS_AHEAD) -> list[str]:
    """Create the partitions of the current month and the ``months_ahead`` next ones that do
    not exist yet; their names. A month whose events already went to the DEFAULT partition is
    skipped with a warning (they stay there: see docs/audit.md)."""
    if not partitioned():
        return []
    with connection.cursor() as cursor:
        cursor.execute("SELECT audit_ensure_partitions(%s)", [months_ahead])
        return [row[0] for row in cursor.fetchall()]


ensuring = AtMostEvery(ENSURE_EVERY_S)


def ensure_due() -> list[str]:
    """:func:`ensure_partitions`, at most every :data:`ENSURE_EVERY_S` in this process (for
    the periodic sweep: the months ahead leave plenty of time)."""
    return ensuring.run(lambda: ensure_partitions(MONTHS_AHEAD))


def drop_partition(name: str, spans: dict[str, tuple[int, datetime]]) -> dict[str, int]:
    """Detach and drop the partition ``name`` through ``audit_drop_partition``; how many events
    of each chain it held. ``spans`` gives each chain in it ``(last seq, cutoff)``: the function
    refuses (and drops nothing) unless every event of the partition is a sealed event of one of
    them, up to its last seq and older than its cutoff, and no event of those chains up to
    their last seqs lives in another partition. Run by :mod:`audit.retention` only, in its
    transaction."""
    chains = sorted(spans)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT chain, purged FROM audit_drop_partition(%s, %s::varchar[], %s::bigint[],"
            " %s::timestamptz[])",
            [
                name,
                chains,
                [spans[chain][0] for chain in chains],
                [spans[chain][1] for chain in chains],
            ],
        )
        return {chain: int(purged) for chain, purged in cursor.fetchall()}


def sizes() -> list[tuple[Partition, int]]:
    """Each partition with how many events it holds (counts every row: for operators)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text, count(*) FROM audit_auditevent GROUP BY 1")
        counts = dict(cursor.fetchall())
    return [(part, int(counts.get(part.name, 0))) for part in partitions()]
