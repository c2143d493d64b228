"""Append-only audit tables on PostgreSQL (DESIGN §7).

A row trigger refuses UPDATE always and DELETE unless the transaction ran
``SET LOCAL mcptasks.audit_retention = 'on'`` (only audit.retention does). Checkpoints are
refused both. SQLite has no such guard: the embedded default is a single-host toy.
"""

from django.db import migrations

FORWARD = """
CREATE OR REPLACE FUNCTION audit_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND TG_TABLE_NAME = 'audit_auditevent'
       AND current_setting('mcptasks.audit_retention', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'audit rows are append-only: % on % refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'only audit.retention may delete, and only old audit events';
END;
$$;
CREATE TRIGGER audit_auditevent_append_only
    BEFORE UPDATE OR DELETE ON audit_auditevent
    FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
CREATE TRIGGER audit_retentioncheckpoint_append_only
    BEFORE UPDATE OR DELETE ON audit_retentioncheckpoint
    FOR EACH ROW EXECUTE FUNCTION audit_refuse_change();
"""

BACKWARD = """
DROP TRIGGER IF EXISTS audit_retentioncheckpoint_append_only ON audit_retentioncheckpoint;
DROP TRIGGER IF EXISTS audit_auditevent_append_only ON audit_auditevent;
DROP FUNCTION IF EXISTS audit_refuse_change();
"""


def _on_postgresql(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql, params=None)

    return run


class Migration(migrations.Migration):

    dependencies = [
        ("audit", "0002_retention"),
    ]

    operations = [
        migrations.RunPython(_on_postgresql(FORWARD), _on_postgresql(BACKWARD), elidable=False),
    ]
