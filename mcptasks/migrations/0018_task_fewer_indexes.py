"""Four indexes of the task table that nothing needs, dropped: each was one more entry to write
per creation and, in every day partition, one more path for the planner to weigh (issue 23:
planning dominated the dashboard's queries over 45 partitions).

- ``tenant_id`` and ``principal_id`` alone: ``task_tenant_created`` and ``task_principal_created``
  lead with those columns (the foreign keys' checks and the tenant's or user's deletion read
  them);
- ``id varchar_pattern_ops`` (the LIKE index Django adds to a text key): ids compare with
  ``COLLATE "C"`` (migration 0016), so the primary key serves ``LIKE 'prefix%'``;
- ``retry_of_id``'s LIKE index: a retry is found by equality only. Its plain index stays, now
  declared as ``task_retry_of``.

Only the indexes change: Django's AlterField would drop and re-add the foreign keys, which on a
partitioned table means every partition's copy of them and a scan of every row. So the fields'
new ``db_index=False`` is state only, and the database drops the indexes by name (Django's
names for them: a hash of table and column, the same on every database)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

DROPPED = {  # name: (column, PostgreSQL-only LIKE index)
    "mcptasks_task_tenant_id_31279f09": ("tenant_id", False),
    "mcptasks_task_principal_id_f8afbf24": ("principal_id", False),
    "mcptasks_task_id_d1367a95_like": ("id", True),
    "mcptasks_task_retry_of_id_5aea9f43_like": ("retry_of_id", True),
}
RETRY_OF_INDEX = "mcptasks_task_retry_of_id_5aea9f43"  # becomes task_retry_of


def drop_indexes(apps, schema_editor):
    quote = schema_editor.quote_name
    postgres = schema_editor.connection.vendor == "postgresql"
    for name, (_, like) in DROPPED.items():
        if postgres or not like:
            schema_editor.execute(f"DROP INDEX IF EXISTS {quote(name)}")
    if postgres:
        schema_editor.execute(f"ALTER INDEX IF EXISTS {quote(RETRY_OF_INDEX)} RENAME TO task_retry_of")
        # whatever the database had: the index Django's state now records
        schema_editor.execute("CREATE INDEX IF NOT EXISTS task_retry_of ON mcptasks_task (retry_of_id)")
    else:  # SQLite renames no index: the new one, then the old one dropped
        schema_editor.execute('CREATE INDEX IF NOT EXISTS task_retry_of ON mcptasks_task (retry_of_id)')
        schema_editor.execute(f"DROP INDEX IF EXISTS {quote(RETRY_OF_INDEX)}")


def restore_indexes(apps, schema_editor):
    quote = schema_editor.quote_name
    postgres = schema_editor.connection.vendor == "postgresql"
    for name, (column, like) in DROPPED.items():
        if like and not postgres:
            continue
        ops = " varchar_pattern_ops" if like else ""
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {quote(name)} ON mcptasks_task ({quote(column)}{ops})"
        )
    schema_editor.execute(
        f"CREATE INDEX IF NOT EXISTS {quote(RETRY_OF_INDEX)} ON mcptasks_task (retry_of_id)"
    )
    schema_editor.execute("DROP INDEX IF EXISTS task_retry_of")


class Migration(migrations.Migration):

    dependencies = [
        ('mcptasks', '0017_task_id_tail'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='task',
                    name='principal',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='tasks', to=settings.AUTH_USER_MODEL),
                ),
                migrations.AlterField(
                    model_name='task',
                    name='retry_of',
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='retries', to='mcptasks.task'),
                ),
                migrations.AlterField(
                    model_name='task',
                    name='tenant',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='tasks', to='mcptasks.tenant'),
                ),
                migrations.AddIndex(
                    model_name='task',
                    index=models.Index(fields=['retry_of'], name='task_retry_of'),
                ),
            ],
            database_operations=[migrations.RunPython(drop_indexes, restore_indexes)],
        ),
    ]
