"""Each input request records the people behind its task: the task's principal and the issuer
of the token that created it (``access.requesters``), copied when the request is made.

Who may answer a request outside MCP, and who may not approve their own, is then read from the
request alone. Before, the inbox and every dashboard page's navigation count joined the pending
requests to the task table, or read the user's own waiting tasks from it, and each such query
spent most of its time being planned over the table's day partitions (issue 23, B4).

Existing requests are filled from their tasks (one statement); migration 0020 then requires the
principal (its own transaction: on PostgreSQL an ALTER TABLE cannot follow the fill's deferred
foreign-key checks in the same one).

Migrations run while the previous release still serves (docs/operations.md, "Upgrading"), and
its workers insert requests without these columns. On PostgreSQL a trigger fills them from the
task for any row inserted without a principal, so those inserts keep working after 0020 and no
request is left without its requesters. It is created before the fill, in the transaction whose
ALTER TABLE already holds the table: no request is inserted between the fill and the trigger.
The application sets both columns itself, so the trigger never fires for it (its WHEN)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from django.db.models import OuterRef, Subquery


FILL_FROM_TASK = [
    """
    CREATE FUNCTION mcptasks_input_request_requesters() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        SELECT t.principal_id, k.issued_by_id INTO NEW.principal_id, NEW.token_issuer_id
        FROM mcptasks_task t LEFT JOIN mcptasks_apitoken k ON k.id = t.token_id
        WHERE t.id = NEW.task_id;
        RETURN NEW;
    END
    $$
    """,
    """
    CREATE TRIGGER input_request_requesters BEFORE INSERT ON mcptasks_inputrequest
    FOR EACH ROW WHEN (NEW.principal_id IS NULL)
    EXECUTE FUNCTION mcptasks_input_request_requesters()
    """,
]
DROP_FILL_FROM_TASK = [
    "DROP TRIGGER input_request_requesters ON mcptasks_inputrequest",
    "DROP FUNCTION mcptasks_input_request_requesters()",
]


def fill_from_task_on_insert(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in FILL_FROM_TASK:
            schema_editor.execute(statement)


def drop_fill_from_task(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in DROP_FILL_FROM_TASK:
            schema_editor.execute(statement)


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
        migrations.RunPython(fill_from_task_on_insert, drop_fill_from_task, elidable=False),
        migrations.RunPython(fill_requesters, migrations.RunPython.noop, elidable=False),
    ]
