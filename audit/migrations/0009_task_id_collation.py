"""Task ids compared byte-wise on PostgreSQL (``COLLATE "C"``), as the task table's own ids are
since ``mcptasks.0016_partition_tasks`` (:mod:`mcptasks.task_ids`): comparing an event's or a
hold's ``task_id`` with a task's id never mixes collations. Nothing changes on SQLite."""

from django.db import migrations

import mcptasks.task_ids


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0008_partition_events"),
    ]

    operations = [
        migrations.AlterField(
            model_name="auditevent",
            name="task_id",
            field=mcptasks.task_ids.TaskIdField(
                blank=True, db_index=True, default="", max_length=64
            ),
        ),
        migrations.AlterField(
            model_name="legalhold",
            name="task_id",
            field=mcptasks.task_ids.TaskIdField(
                blank=True, db_index=True, default="", max_length=64
            ),
        ),
    ]
