"""Audit events partitioned by month of ``created_at`` on PostgreSQL (issue 23, docs/audit.md).

``audit_auditevent`` becomes a table partitioned by RANGE (``created_at``), without copying a
row: the existing table is renamed ``audit_auditevent_legacy``, a partitioned parent with the
same columns (and the same identity sequence position: ids keep coming from one sequence) takes
its name, and the old table is ATTACHed as the partition of everything before the first of the
month after its newest event (at least the month after the migration). Its indexes are
attached as they are; only the primary key is built again, as ``(id, created_at)`` — a
partitioned table's unique keys must include the partition key (Django still treats ``id`` as
the primary key). Monthly partitions follow (``audit_auditevent_pYYYYMM``, created ahead by
``audit_ensure_partitions``: the migration, the periodic sweep, ``manage.py audit_partitions``),
and a DEFAULT partition catches an event no monthly partition covers, so an insert never fails.

What changes with it:

- ``UNIQUE (chain, seq)`` cannot be global: each partition keeps a unique ``(chain, seq)``
  index of its own; the trigger ``audit_auditevent_seq_unique`` refuses an INSERT of a sealed
  event whose ``(chain, seq)`` another partition already holds, and ``audit_seal_events`` (the
  one UPDATE: the application role holds no UPDATE privilege) refuses to give a seq its chain
  already has, checked per chain rather than per row. Writers of a chain are serialised by its
  head lock, so neither check can race.
- The append-only trigger is created on the parent, so every partition, present or future,
  gets it; ``audit_refuse_change`` recognises an event partition by the trigger's argument.
- ``audit_partitions()`` lists the partitions and their bounds; ``audit_drop_partition``
  (``SECURITY DEFINER``, like ``audit_purge_prefix``) is retention's whole-partition purge.

Irreversible on PostgreSQL (going back would copy every row into a plain table: restore a
backup instead); SQLite keeps its ordinary table and both directions are no-ops there.
"""

import re
from importlib import import_module

from django.db import migrations
from django.db.migrations.exceptions import IrreversibleError

_FUNCTIONS_0007 = import_module("audit.migrations.0007_seal_trigger").FORWARD

TABLE = "audit_auditevent"
LEGACY = "audit_auditevent_legacy"
DEFAULT = "audit_auditevent_default"
MONTHS_AHEAD = 3  # audit.partitions.MONTHS_AHEAD when this migration was written

# 0007's trigger function, recognising the partitions (whose TG_TABLE_NAME is their own) by
# the argument the parent's trigger passes.
REFUSE_CHANGE = _FUNCTIONS_0007.split("CREATE OR REPLACE FUNCTION audit_seal_events")[0].replace(
    "IF TG_TABLE_NAME = 'audit_auditevent' THEN",
    "IF TG_TABLE_NAME = 'audit_auditevent' OR TG_ARGV[0] = 'audit_auditevent' THEN",
)
assert "TG_ARGV[0]" in REFUSE_CHANGE

FUNCTIONS = r"""
-- Index probes always (one per partition), whatever the statistics of a young partition say:
-- a sequential scan per inserted row would make a bulk load quadratic.
CREATE OR REPLACE FUNCTION audit_refuse_duplicate_seq() RETURNS trigger
LANGUAGE plpgsql SET enable_seqscan = off AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM audit_auditevent
               WHERE chain = NEW.chain AND seq = NEW.seq AND id <> NEW.id) THEN
        RAISE EXCEPTION 'audit chain % already has seq %', NEW.chain, NEW.seq
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'audit_chain_seq_unique';
    END IF;
    RETURN NEW;
END;
$$;

-- 0007's seal, refusing a seq its chain already has: in one statement with the UPDATE (whose
-- outer query still sees the events as they were), per chain, not per row.
CREATE OR REPLACE FUNCTION audit_seal_events(p_ids bigint[], p_seqs bigint[],
                                             p_prev_hashes varchar[], p_hashes varchar[])
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    sealed_count bigint;
    duplicate text;
BEGIN
    PERFORM set_config('mcptasks.audit_seal', 'on', true);
    WITH sealed AS (
        UPDATE audit_auditevent AS e
           SET seq = v.seq, prev_hash = v.prev_hash, hash = v.hash
          FROM unnest(p_ids, p_seqs, p_prev_hashes, p_hashes) AS v(id, seq, prev_hash, hash)
         WHERE e.id = v.id AND e.seq IS NULL
     RETURNING e.chain, e.seq
    ), chains AS (
        SELECT chain, min(seq) AS first_seq, count(*) AS n, count(DISTINCT seq) AS seqs
          FROM sealed GROUP BY chain
    )
    SELECT coalesce(sum(n), 0),
           min(chain) FILTER (WHERE seqs < n OR EXISTS (
               SELECT 1 FROM audit_auditevent o WHERE o.chain = c.chain AND o.seq >= c.first_seq))
      INTO sealed_count, duplicate
      FROM chains c;
    IF duplicate IS NOT NULL THEN
        RAISE EXCEPTION 'audit chain % already has a seq this seal gives', duplicate
            USING ERRCODE = 'unique_violation', CONSTRAINT = 'audit_chain_seq_unique';
    END IF;
    PERFORM set_config('mcptasks.audit_seal', 'off', true);
    RETURN sealed_count;
END;
$$;
REVOKE ALL ON FUNCTION audit_seal_events(bigint[], bigint[], varchar[], varchar[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION audit_partitions()
RETURNS TABLE (name text, lower_bound timestamptz, upper_bound timestamptz, is_default boolean)
LANGUAGE sql STABLE SET search_path = pg_catalog, public AS $$
    SELECT c.relname::text,
           (substring(pg_get_expr(c.relpartbound, c.oid) FROM 'FROM \(''([^'']+)''\)'))::timestamptz,
           (substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''([^'']+)''\)'))::timestamptz,
           pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT'
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'audit_auditevent'::regclass
     ORDER BY 4, 3 NULLS FIRST;
$$;

CREATE OR REPLACE FUNCTION audit_ensure_partitions(p_months_ahead integer)
RETURNS SETOF text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
SET lock_timeout = '2s' AS $$
DECLARE
    month timestamp;
    lo timestamptz;
    hi timestamptz;
    part text;
BEGIN
    IF p_months_ahead < 0 OR p_months_ahead > 24 THEN
        RAISE EXCEPTION 'audit partitions: months ahead must be 0 to 24, not %', p_months_ahead;
    END IF;
    FOR i IN 0..p_months_ahead LOOP
        month := date_trunc('month', now() AT TIME ZONE 'UTC') + make_interval(months => i);
        lo := month AT TIME ZONE 'UTC';
        hi := (month + interval '1 month') AT TIME ZONE 'UTC';
        part := 'audit_auditevent_p' || to_char(month, 'YYYYMM');
        CONTINUE WHEN EXISTS (
            SELECT 1 FROM audit_partitions() p
             WHERE NOT p.is_default AND coalesce(p.lower_bound, '-infinity') < hi
               AND p.upper_bound > lo);
        BEGIN
            EXECUTE format('CREATE TABLE public.%I (LIKE audit_auditevent)', part);
            EXECUTE format('CREATE UNIQUE INDEX %I ON %I (chain, seq)', part || '_chain_seq', part);
            -- ATTACH (not CREATE … PARTITION OF): the parent is locked SHARE UPDATE EXCLUSIVE
            -- only, so writers go on; the DEFAULT partition is checked for rows of the month.
            EXECUTE format('ALTER TABLE audit_auditevent ATTACH PARTITION %I '
                           'FOR VALUES FROM (%L) TO (%L)', part, lo, hi);
            EXECUTE format('REVOKE ALL ON %I FROM PUBLIC', part);
            RETURN NEXT part;
        EXCEPTION
            WHEN check_violation THEN
                RAISE WARNING 'audit partition % not created: the DEFAULT partition holds '
                              'events of that month (they stay there; see docs/audit.md)', part;
            WHEN duplicate_table THEN
                RAISE WARNING 'audit partition % not created: a table of that name exists '
                              'and is not a partition of audit_auditevent', part;
            WHEN lock_not_available THEN
                RAISE WARNING 'audit partition % not created: the table was busy; the next '
                              'sweep tries again', part;
        END;
    END LOOP;
END;
$$;
REVOKE ALL ON FUNCTION audit_ensure_partitions(integer) FROM PUBLIC;

CREATE OR REPLACE FUNCTION audit_drop_partition(p_partition text, p_chains varchar[],
                                                p_last_seqs bigint[], p_cutoffs timestamptz[])
RETURNS TABLE (chain varchar, purged bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
SET lock_timeout = '1s' AS $$
DECLARE
    other text;
    bad record;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM audit_partitions() p
                   WHERE p.name = p_partition AND p.upper_bound IS NOT NULL) THEN
        RAISE EXCEPTION 'audit retention refused: % is not a bounded partition of '
                        'audit_auditevent', p_partition USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- No write reaches the partition from here on (readers go on until the DETACH below).
    EXECUTE format('LOCK TABLE %I IN SHARE MODE', p_partition);
    -- Every event of it: sealed, of a listed chain, up to that chain's last seq, older than
    -- that chain's cutoff.
    EXECUTE format(
        'SELECT e.chain, e.seq, e.created_at FROM %I e '
        'LEFT JOIN unnest($1, $2, $3) AS v(chain, last_seq, cutoff) ON v.chain = e.chain '
        'WHERE v.chain IS NULL OR e.seq IS NULL OR e.seq > v.last_seq '
        'OR e.created_at >= v.cutoff LIMIT 1', p_partition)
        INTO bad USING p_chains, p_last_seqs, p_cutoffs;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'audit retention refused: partition % holds % seq % (%), which is not '
                        'in the purge', p_partition, bad.chain, bad.seq, bad.created_at
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- A prefix of each chain: no event of it up to its last seq lives in another partition.
    FOR other IN SELECT p.name FROM audit_partitions() p WHERE p.name <> p_partition LOOP
        EXECUTE format(
            'SELECT e.chain, e.seq, e.created_at FROM %I e '
            'JOIN unnest($1, $2) AS v(chain, last_seq) ON v.chain = e.chain '
            'WHERE e.seq <= v.last_seq LIMIT 1', other)
            INTO bad USING p_chains, p_last_seqs;
        IF bad IS NOT NULL THEN
            RAISE EXCEPTION 'audit retention refused: % seq % is in partition %, not %: the '
                            'purge would not be a prefix', bad.chain, bad.seq, other, p_partition
                USING ERRCODE = 'insufficient_privilege';
        END IF;
    END LOOP;
    RETURN QUERY EXECUTE format(
        'SELECT e.chain, count(*) FROM %I e GROUP BY e.chain ORDER BY e.chain', p_partition);
    EXECUTE format('ALTER TABLE audit_auditevent DETACH PARTITION %I', p_partition);
    EXECUTE format('DROP TABLE %I', p_partition);
END;
$$;
REVOKE ALL ON FUNCTION audit_drop_partition(text, varchar[], bigint[], timestamptz[]) FROM PUBLIC;
"""


def _partition(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:

        def run(sql, params=None):
            cursor.execute(sql, params)
            return cursor

        run(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE")
        # The first boundary: the month after the newest event, and after today.
        boundary = run(
            "SELECT (date_trunc('month', greatest(now(), max(created_at)) AT TIME ZONE 'UTC')"
            f" + interval '1 month') AT TIME ZONE 'UTC' FROM {TABLE}"
        ).fetchone()[0]
        # The identity's next value, kept by the parent's own identity.
        next_id = run(f"SELECT nextval(pg_get_serial_sequence('{TABLE}', 'id'))").fetchone()[0]
        indexes = run(
            "SELECT i.relname, pg_get_indexdef(i.oid), x.indisprimary, x.indisunique"
            " FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid"
            f" WHERE x.indrelid = '{TABLE}'::regclass ORDER BY i.relname"
        ).fetchall()
        run(f"DROP TRIGGER audit_auditevent_append_only ON {TABLE}")
        run(f"ALTER TABLE {TABLE} RENAME TO {LEGACY}")
        run(f"ALTER TABLE {LEGACY} DROP CONSTRAINT {TABLE}_pkey")
        run(f"ALTER TABLE {LEGACY} RENAME CONSTRAINT audit_chain_seq_unique TO {LEGACY}_chain_seq")
        run(
            f"CREATE TABLE {TABLE} (LIKE {LEGACY} INCLUDING DEFAULTS INCLUDING IDENTITY)"
            " PARTITION BY RANGE (created_at)"
        )
        run(f"ALTER TABLE {LEGACY} ALTER COLUMN id DROP IDENTITY")  # drops the old sequence
        sequence = run(f"SELECT pg_get_serial_sequence('{TABLE}', 'id')").fetchone()[0]
        run(f"ALTER SEQUENCE {sequence} RENAME TO {TABLE}_id_seq")
        run(f"ALTER TABLE {TABLE} ALTER COLUMN id RESTART WITH {int(next_id)}")
        run(f"ALTER TABLE {TABLE} ADD CONSTRAINT {TABLE}_pkey PRIMARY KEY (id, created_at)")
        # The other indexes, on the parent under their names; ATTACH adopts the old table's.
        for name, definition, primary, unique in indexes:
            if primary or unique:
                continue
            run(f"ALTER INDEX {name} RENAME TO {('lg_' + name)[:63]}")
            run(re.sub(rf" ON (\S+\.)?{TABLE} USING ", f" ON {TABLE} USING ", definition))
        run(
            f"ALTER TABLE {TABLE} ATTACH PARTITION {LEGACY}"
            f" FOR VALUES FROM (MINVALUE) TO ('{boundary.isoformat()}')"
        )
        run(f"CREATE TABLE {DEFAULT} PARTITION OF {TABLE} DEFAULT")
        run(f"CREATE UNIQUE INDEX {DEFAULT}_chain_seq ON {DEFAULT} (chain, seq)")
        run(REFUSE_CHANGE)
        run(FUNCTIONS)
        run(
            f"CREATE TRIGGER audit_auditevent_append_only BEFORE UPDATE OR DELETE ON {TABLE}"
            " FOR EACH ROW EXECUTE FUNCTION audit_refuse_change('audit_auditevent')"
        )
        run(
            f"CREATE TRIGGER audit_auditevent_seq_unique BEFORE INSERT ON {TABLE}"
            " FOR EACH ROW WHEN (NEW.seq IS NOT NULL) EXECUTE FUNCTION audit_refuse_duplicate_seq()"
        )
        run(f"REVOKE ALL ON {LEGACY}, {DEFAULT} FROM PUBLIC")
        run("SELECT audit_ensure_partitions(%s)", [MONTHS_AHEAD]).fetchall()


def _irreversible(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        raise IrreversibleError(
            "audit 0008 partitioned audit_auditevent; going back would copy every event into a "
            "plain table. Restore a backup taken before the migration instead."
        )


class Migration(migrations.Migration):

    dependencies = [
        ("audit", "0007_seal_trigger"),
    ]

    operations = [
        migrations.RunPython(_partition, _irreversible, elidable=False),
    ]
