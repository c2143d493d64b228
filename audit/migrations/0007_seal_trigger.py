"""The seal: the one UPDATE an audit event may get (DESIGN §7, issue 23).

An event recorded with ``MCPTASKS_AUDIT_SEAL_DELAY_MS`` > 0 is inserted unsealed (``seq``,
``prev_hash``, ``hash`` null) and sealed after commit by :mod:`audit.seal` through
``audit_seal_events(ids, seqs, prev_hashes, hashes)``. Like retention's ``audit_purge_prefix``
(0004) the function is ``SECURITY DEFINER`` (the application's role holds no UPDATE on audit
rows, only EXECUTE on it) and sets ``mcptasks.audit_seal`` locally around its own UPDATE. The
append-only trigger (0003) now lets an UPDATE of ``audit_auditevent`` through only then, and only
when it is a seal: the three chain columns go from null to values and every other column stays
as it was. Sealed events, and checkpoints, are still refused every UPDATE.
"""

from importlib import import_module

from django.db import migrations

# The same PostgreSQL-only RunPython as the trigger migration.
_on_postgresql = import_module("audit.migrations.0003_append_only_trigger")._on_postgresql
_TRIGGER_0003 = import_module("audit.migrations.0003_append_only_trigger").FORWARD

FORWARD = """
CREATE OR REPLACE FUNCTION audit_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'audit_auditevent' THEN
        IF TG_OP = 'DELETE' AND current_setting('mcptasks.audit_retention', true) = 'on' THEN
            RETURN OLD;
        END IF;
        IF TG_OP = 'UPDATE' AND current_setting('mcptasks.audit_seal', true) = 'on'
           AND OLD.seq IS NULL AND OLD.prev_hash IS NULL AND OLD.hash IS NULL
           AND NEW.seq IS NOT NULL AND NEW.prev_hash IS NOT NULL AND NEW.hash IS NOT NULL
           AND (NEW.id, NEW.chain, NEW.created_at, NEW.tenant_id, NEW.actor_kind, NEW.actor_id,
                NEW.actor_display, NEW.action, NEW.task_id, NEW.data, NEW.request_id)
               IS NOT DISTINCT FROM
               (OLD.id, OLD.chain, OLD.created_at, OLD.tenant_id, OLD.actor_kind, OLD.actor_id,
                OLD.actor_display, OLD.action, OLD.task_id, OLD.data, OLD.request_id) THEN
            RETURN NEW;
        END IF;
    END IF;
    RAISE EXCEPTION 'audit rows are append-only: % on % refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'only audit.seal may seal an unsealed event, only audit.retention may '
                     'delete, and only old audit events';
END;
$$;
CREATE OR REPLACE FUNCTION audit_seal_events(p_ids bigint[], p_seqs bigint[],
                                             p_prev_hashes varchar[], p_hashes varchar[])
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    sealed bigint;
BEGIN
    PERFORM set_config('mcptasks.audit_seal', 'on', true);
    UPDATE audit_auditevent AS e
       SET seq = v.seq, prev_hash = v.prev_hash, hash = v.hash
      FROM unnest(p_ids, p_seqs, p_prev_hashes, p_hashes) AS v(id, seq, prev_hash, hash)
     WHERE e.id = v.id AND e.seq IS NULL;
    GET DIAGNOSTICS sealed = ROW_COUNT;
    PERFORM set_config('mcptasks.audit_seal', 'off', true);
    RETURN sealed;
END;
$$;
REVOKE ALL ON FUNCTION audit_seal_events(bigint[], bigint[], varchar[], varchar[]) FROM PUBLIC;
"""

BACKWARD = (
    "DROP FUNCTION IF EXISTS audit_seal_events(bigint[], bigint[], varchar[], varchar[]);\n"
    # 0003's function again (its CREATE TRIGGERs are skipped: the triggers still exist).
    + _TRIGGER_0003.split("CREATE TRIGGER")[0]
)


class Migration(migrations.Migration):

    dependencies = [
        ("audit", "0006_unsealed_events"),
    ]

    operations = [
        migrations.RunPython(_on_postgresql(FORWARD), _on_postgresql(BACKWARD), elidable=False),
    ]
