"""Each input request records the people behind its task: the task's principal and the issuer
of the token that created it (``access.requesters``), copied when the request is made.

Who may answer a request outside MCP, and who may not approve their own, is then read from the
request alone. Before, the inbox and every dashboard page's navigation count joined the pending
requests to the task table, or read the user's own waiting tasks from it, and each such query
spent most of its time being planned over the table's day partitions (issue 23, B4).

Existing requests are filled from their tasks (one statement); migration 0020 then requires the
principal (its own transaction: on PostgreSQL an ALTER TABLE cannot follow the fill's deferred
foreign-key checks in the same one)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def fill_requesters(apps, schema_editor):
    InputRequest = apps.get_model("mcptasks", "InputRequest")
    Task = apps.get_model("mcptasks", "Task")
    task = Task.objects.using(schema_editor.connection.alias).filter(pk=OuterRef("task_id"))
    InputRequest.objects.using(schema_editor.connection.alias).update(
        principal_id=Subquery(task.values("principal_id")[:1]),
        token_issuer_id=Subquery(task.values("token__issued_by_id")[:1]),
    )


class Migration(migrations.Migration):

    dependencies = [
        ("mcptasks", "0018_task_fewer_indexes"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="inputrequest",
            name="principal",
            field=models.ForeignKey(
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddField(
            model_name="inputrequest",
            name="token_issuer",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.RunPython(fill_requesters, migrations.RunPython.noop, elidable=False),
    ]
