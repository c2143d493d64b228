"""The generic plan PostgreSQL would cache for a statement a connection prepares (mcptasks.conf
prepares what it runs often): for tests that a statement's generic plan still reads the index
it should."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection, transaction


def generic_plan(sql: str, values: Sequence[Any]) -> str:
    """``EXPLAIN`` of ``sql`` (``%s`` placeholders, no ``%%``) prepared and executed with
    ``values`` under ``force_generic_plan``, sequential scans off (the tests' tables are small: a
    scan would cost nothing and hide which index the plan can use). The settings are rolled back
    with the savepoint they were made in."""
    parts = sql.split("%s")
    numbered = parts[0] + "".join(f"${n}{part}" for n, part in enumerate(parts[1:], start=1))
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"PREPARE generic_plan_of AS {numbered}")
        try:
            arguments = f" ({', '.join(['%s'] * len(values))})" if values else ""
            cursor.execute(
                connection.ops.compose_sql(f"EXPLAIN EXECUTE generic_plan_of{arguments}", values)
            )
            return "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("DEALLOCATE generic_plan_of")
            transaction.set_rollback(True)
