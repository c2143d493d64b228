"""Tasks partitioned by day of creation on PostgreSQL (issue 23, docs/operations.md "Task
partitions").

``mcptasks_task`` becomes a table partitioned by RANGE (``id``), without copying a row. A task id
starts with its creation day (:mod:`mcptasks.task_ids`: ``~YYYYMMDD`` + random), compared
byte-wise (``COLLATE "C"``, first altered here on every column holding a task id), so a day's
tasks are one range of ids:

- the existing table is renamed ``mcptasks_task_legacy`` and ATTACHed as the partition of the
  ids below ``~`` — every id made before (``secrets.token_urlsafe``: letters, digits, ``-``,
  ``_``) — and of the days up to the migration's (ids of code that ran before it), keeping its
  indexes, which the parent's adopt;
- ``mcptasks_task_pYYYYMMDD`` partitions follow, one per day (UTC), created ahead by
  ``mcptasks_task_ensure_partitions`` (this migration, the periodic sweep, ``manage.py
  task_partitions --ensure``);
- ``mcptasks_task_default`` (DEFAULT) takes an id no other partition covers, so an insert never
  fails for want of a partition.

The primary key stays ``id`` (it is the partition key), so every foreign key to a task stays as
it was: they are dropped from the old table and created again on the parent, under their names.
``mcptasks_task_partition_purge`` (``SECURITY DEFINER``: the application's role owns no table)
checks a day's partition under a lock — every task terminal and past its TTL plus the grace, no
legal hold, no effect whose outcome is undecided — and, when asked, DETACHes and DROPs it.

Irreversible on PostgreSQL (going back would copy every task into a plain table: restore a
backup instead). SQLite keeps its ordinary table; only the field changes apply there.
"""

import re
from datetime import datetime, timedelta

from django.db import migrations
from django.db.migrations.exceptions import IrreversibleError

import mcptasks.task_ids

TABLE = "mcptasks_task"
LEGACY = "mcptasks_task_legacy"
DEFAULT = "mcptasks_task_default"
DAYS_AHEAD = 7  # mcptasks.task_partitions.DAYS_AHEAD when this migration was written

# Literals of code constants (mcptasks.models): TERMINAL_STATES and the undecided effect
# states (lifecycle.retention.UNDECIDED_EFFECTS); tests/tasks/test_task_partitions.py checks
# them against the code.
FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION mcptasks_task_partitions()
RETURNS TABLE (name text, lower_bound text, upper_bound text, is_default boolean)
LANGUAGE sql STABLE SET search_path = pg_catalog, public AS $$
    SELECT * FROM (
        SELECT c.relname::text AS name,
               substring(pg_get_expr(c.relpartbound, c.oid) FROM 'FROM \(''([^'']*)''\)') AS lo,
               substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''([^'']*)''\)') AS hi,
               pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT' AS is_default
          FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'mcptasks_task'::regclass) p
     ORDER BY p.is_default, p.hi COLLATE "C" NULLS FIRST;
$$;

CREATE OR REPLACE FUNCTION mcptasks_task_ensure_partitions(p_days_ahead integer)
RETURNS SETOF text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
SET lock_timeout = '2s' AS $$
DECLARE
    day date;
    lo text;
    hi text;
    part text;
BEGIN
    IF p_days_ahead < 0 OR p_days_ahead > 60 THEN
        RAISE EXCEPTION 'task partitions: days ahead must be 0 to 60, not %', p_days_ahead;
    END IF;
    FOR i IN 0..p_days_ahead LOOP
        day := (now() AT TIME ZONE 'UTC')::date + i;
        lo := '~' || to_char(day, 'YYYYMMDD');
        hi := '~' || to_char(day + 1, 'YYYYMMDD');
        part := 'mcptasks_task_p' || to_char(day, 'YYYYMMDD');
        CONTINUE WHEN EXISTS (
            SELECT 1 FROM mcptasks_task_partitions() p
             WHERE NOT p.is_default AND coalesce(p.lower_bound, '') < hi COLLATE "C"
               AND p.upper_bound > lo COLLATE "C");
        BEGIN
            EXECUTE format('CREATE TABLE public.%I (LIKE mcptasks_task INCLUDING DEFAULTS)', part);
            -- ATTACH (not CREATE … PARTITION OF): the parent is locked SHARE UPDATE EXCLUSIVE
            -- only, so writers go on; the DEFAULT partition is checked for ids of the day.
            EXECUTE format('ALTER TABLE mcptasks_task ATTACH PARTITION %I '
                           'FOR VALUES FROM (%L) TO (%L)', part, lo, hi);
            EXECUTE format('REVOKE ALL ON %I FROM PUBLIC', part);
            RETURN NEXT part;
        EXCEPTION
            WHEN check_violation THEN
                RAISE WARNING 'task partition % not created: the DEFAULT partition holds '
                              'tasks of that day (they stay there)', part;
            WHEN duplicate_table THEN
                RAISE WARNING 'task partition % not created: a table of that name exists '
                              'and is not a partition of mcptasks_task', part;
            WHEN lock_not_available THEN
                RAISE WARNING 'task partition % not created: the table was busy; the next '
                              'sweep tries again', part;
        END;
    END LOOP;
END;
$$;
REVOKE ALL ON FUNCTION mcptasks_task_ensure_partitions(integer) FROM PUBLIC;

-- A day's partition, checked: how many tasks it holds. Refused unless every one is terminal,
-- past its TTL plus the grace (expires_at <= p_cutoff), under no active legal hold and with no
-- effect whose outcome is undecided. With p_drop it is checked again under a SHARE lock (no
-- task of it changes until the caller's transaction ends), DETACHed and DROPped: the caller
-- deleted the tasks' dependent rows (the foreign keys to them) and recorded their purge first,
-- in its transaction, which rolls all of it back if this refuses.
CREATE OR REPLACE FUNCTION mcptasks_task_partition_purge(p_partition text, p_cutoff timestamptz,
                                                         p_drop boolean)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
SET lock_timeout = '1s' AS $$
DECLARE
    bad record;
    held bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM mcptasks_task_partitions() p
                   WHERE p.name = p_partition AND p.lower_bound IS NOT NULL
                     AND p.upper_bound IS NOT NULL AND NOT p.is_default) THEN
        RAISE EXCEPTION 'task purge refused: % is not a day partition of mcptasks_task',
                        p_partition USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF p_drop THEN
        EXECUTE format('LOCK TABLE %I IN SHARE MODE', p_partition);
    END IF;
    EXECUTE format(
        'SELECT t.id, t.state, t.expires_at FROM %I t '
        'WHERE t.state NOT IN (''cancelled'', ''completed'', ''failed'') '
        'OR t.expires_at IS NULL OR t.expires_at > $1 '
        'OR EXISTS (SELECT 1 FROM mcptasks_effect e WHERE e.task_id = t.id '
        '           AND e.state IN (''intended'', ''unknown'')) LIMIT 1', p_partition)
        INTO bad USING p_cutoff;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'task purge refused: partition % holds task % (%, expires %), which '
                        'is not due', p_partition, bad.id, bad.state, bad.expires_at
            USING ERRCODE = 'object_in_use';
    END IF;
    EXECUTE format(
        'SELECT count(*) FROM %I t JOIN audit_legalhold h ON h.tenant_id = t.tenant_id '
        'AND h.released_at IS NULL AND (h.task_id = '''' OR h.task_id = t.id)', p_partition)
        INTO held;
    IF held > 0 THEN
        RAISE EXCEPTION 'task purge refused: a legal hold covers % task(s) of partition %',
                        held, p_partition USING ERRCODE = 'object_in_use';
    END IF;
    IF p_drop THEN
        EXECUTE format('ALTER TABLE mcptasks_task DETACH PARTITION %I', p_partition);
        EXECUTE format('SELECT count(*) FROM %I', p_partition) INTO held;
        EXECUTE format('DROP TABLE %I', p_partition);
        RETURN held;
    END IF;
    EXECUTE format('SELECT count(*) FROM %I', p_partition) INTO held;
    RETURN held;
END;
$$;
REVOKE ALL ON FUNCTION mcptasks_task_partition_purge(text, timestamptz, boolean) FROM PUBLIC;
"""


def _legacy_upper(run):
    """Where the legacy partition ends: at ``~``, or after the newest day-prefixed id it holds
    already (code that makes them may have run before this migration)."""
    newest = run(f"SELECT max(id) FROM {LEGACY} WHERE id >= '~'").fetchone()[0]
    if newest is None:
        return "~"
    if not re.fullmatch(r"~\d{8}.*", newest):
        raise RuntimeError(f"mcptasks 0016: task id {newest!r} is not one this server makes")
    day = datetime.strptime(newest[1:9], "%Y%m%d").date()
    return f"~{day + timedelta(days=1):%Y%m%d}"


def _partition(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:

        def run(sql, params=None):
            cursor.execute(sql, params)
            return cursor

        run(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE")
        indexes = run(
            "SELECT i.relname, pg_get_indexdef(i.oid), x.indisprimary"
            " FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid"
            f" WHERE x.indrelid = '{TABLE}'::regclass ORDER BY i.relname"
        ).fetchall()
        # Foreign keys: the task's own (to tenants, users, tokens, itself) and every one to it.
        foreign = run(
            "SELECT c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid)"
            f" FROM pg_constraint c WHERE c.contype = 'f' AND (c.conrelid = '{TABLE}'::regclass"
            f" OR c.confrelid = '{TABLE}'::regclass) ORDER BY 1, 2"
        ).fetchall()
        for table, name, _ in foreign:
            run(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
        run(f"ALTER TABLE {TABLE} RENAME TO {LEGACY}")
        run(f"ALTER TABLE {LEGACY} RENAME CONSTRAINT {TABLE}_pkey TO {LEGACY}_pkey")
        run(
            f"CREATE TABLE {TABLE} (LIKE {LEGACY} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
            " PARTITION BY RANGE (id)"
        )
        run(f"ALTER TABLE {TABLE} ADD CONSTRAINT {TABLE}_pkey PRIMARY KEY (id)")
        # The other indexes, on the parent under their names; ATTACH adopts the old table's.
        for name, definition, primary in indexes:
            if primary:
                continue
            run(f'ALTER INDEX "{name}" RENAME TO "{("lg_" + name)[:63]}"')
            run(re.sub(rf" ON (\S+\.)?{TABLE} USING ", f" ON {TABLE} USING ", definition))
        run(
            f"ALTER TABLE {TABLE} ATTACH PARTITION {LEGACY}"
            f" FOR VALUES FROM (MINVALUE) TO ('{_legacy_upper(run)}')"
        )
        run(f"CREATE TABLE {DEFAULT} PARTITION OF {TABLE} DEFAULT")
        for table, name, definition in foreign:
            table = TABLE if table == LEGACY else table
            run(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
        run(FUNCTIONS)
        run(f"REVOKE ALL ON {LEGACY}, {DEFAULT} FROM PUBLIC")
        run("SELECT mcptasks_task_ensure_partitions(%s)", [DAYS_AHEAD]).fetchall()


def _irreversible(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        raise IrreversibleError(
            "mcptasks 0016 partitioned mcptasks_task; going back would copy every task into a "
            "plain table. Restore a backup taken before the migration instead."
        )


def _id_field():
    return mcptasks.task_ids.TaskIdField(
        default=mcptasks.task_ids.new_task_id,
        editable=False,
        max_length=64,
        primary_key=True,
        serialize=False,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("mcptasks", "0015_task_creation_keys"),
        ("audit", "0005_digests_and_holds"),  # the purge function reads the legal holds
    ]

    operations = [
        migrations.AlterField(model_name="task", name="id", field=_id_field()),
        migrations.AlterField(
            model_name="delivery",
            name="task_id",
            field=mcptasks.task_ids.TaskIdField(blank=True, default="", max_length=64),
        ),
        migrations.RunPython(_partition, _irreversible, elidable=False),
    ]
