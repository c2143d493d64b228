"""Retention's one DELETE, as a function that runs with its owner's rights (DESIGN §7).

``audit_purge_prefix(chain, last_seq, cutoff)`` deletes the events of ``chain`` up to
``last_seq`` — a prefix, so the rest still verifies from the checkpoint — and refuses when any of
them is not older than ``cutoff``. It is ``SECURITY DEFINER``: the application's database role
(``MCPTASKS_DB_APP_ROLE``, docs/operations.md) may insert and read audit rows and EXECUTE this,
but holds no UPDATE, DELETE or TRUNCATE on them and, not owning the tables, cannot disable their
triggers. The function opens the append-only trigger (0003) for its own DELETE only.
"""

from importlib import import_module

from django.db import migrations

# The same PostgreSQL-only RunPython as the trigger migration.
_on_postgresql = import_module("audit.migrations.0003_append_only_trigger")._on_postgresql

FORWARD = """
CREATE OR REPLACE FUNCTION audit_purge_prefix(p_chain varchar, p_last_seq bigint,
                                              p_cutoff timestamptz)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    purged bigint;
BEGIN
    IF EXISTS (SELECT 1 FROM audit_auditevent
               WHERE chain = p_chain AND seq <= p_last_seq AND created_at >= p_cutoff) THEN
        RAISE EXCEPTION 'audit retention refused: events of % up to #% are not all older than %',
            p_chain, p_last_seq, p_cutoff USING ERRCODE = 'insufficient_privilege';
    END IF;
    PERFORM set_config('mcptasks.audit_retention', 'on', true);
    DELETE FROM audit_auditevent WHERE chain = p_chain AND seq <= p_last_seq;
    GET DIAGNOSTICS purged = ROW_COUNT;
    PERFORM set_config('mcptasks.audit_retention', 'off', true);
    RETURN purged;
END;
$$;
REVOKE ALL ON FUNCTION audit_purge_prefix(varchar, bigint, timestamptz) FROM PUBLIC;
"""

BACKWARD = """
DROP FUNCTION IF EXISTS audit_purge_prefix(varchar, bigint, timestamptz);
"""


class Migration(migrations.Migration):

    dependencies = [
        ("audit", "0003_append_only_trigger"),
    ]

    operations = [
        migrations.RunPython(_on_postgresql(FORWARD), _on_postgresql(BACKWARD), elidable=False),
    ]
