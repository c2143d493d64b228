"""Creation keys move from ``mcptasks_task.creation_key`` to a table of their own,
``mcptasks_taskcreationkey`` (``models.TaskCreationKey``), so that the task table can be
partitioned by ``id`` (0016): a partitioned table cannot hold the unique (principal,
creation_key) constraint, which does not contain the partition key. The constraint keeps its
name on the new table.

Every task that holds a key gets its row (one INSERT … SELECT; the row's ``created_at`` is the
task's, which the idempotency window counts from); the constraint and then the column go. The
old constraint is removed first: on PostgreSQL an index name is unique in the schema, and the
new table's constraint takes the same name. Reversible: the keys are copied back.
"""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

COPY_KEYS = """
INSERT INTO mcptasks_taskcreationkey (principal_id, "key", task_id, created_at)
SELECT principal_id, creation_key, id, created_at FROM mcptasks_task
 WHERE creation_key IS NOT NULL
"""

COPY_KEYS_BACK = """
UPDATE mcptasks_task
   SET creation_key = (SELECT MIN(k."key") FROM mcptasks_taskcreationkey k
                        WHERE k.task_id = mcptasks_task.id)
 WHERE id IN (SELECT task_id FROM mcptasks_taskcreationkey)
"""


class Migration(migrations.Migration):
    dependencies = [
        ("mcptasks", "0014_task_queued_updated"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="task", name="task_creation_key_unique"),
        migrations.CreateModel(
            name="TaskCreationKey",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("key", models.CharField(max_length=128)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "principal",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "task",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="creation_keys",
                        to="mcptasks.task",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("principal", "key"), name="task_creation_key_unique"
                    )
                ],
            },
        ),
        migrations.RunSQL(COPY_KEYS, COPY_KEYS_BACK, elidable=False),
        migrations.RemoveField(model_name="task", name="creation_key"),
    ]
