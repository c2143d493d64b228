"""Migration 0016 partitions a task table that already holds tasks with the ids made before
(``secrets.token_urlsafe``) and rows pointing at them: every task and dependent row survives
under its id, the foreign keys point at the partitioned table and still hold, and new tasks go to
their day's partition. Run on a database of its own (migrated to 0015 first), in processes of
their own, as ``manage.py migrate`` runs in production. The input request made before also gets
the people behind its task (migration 0019)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.scratch_db import run_django, scratch_database

pytestmark = [pytest.mark.pg, pytest.mark.django_db]

BEFORE = """
import json, secrets, django; django.setup()
from django.db import connection
from guardian.shortcuts import assign_perm
from mcptasks.management.commands.seed_demo import seed_cast
from mcptasks.models import Effect, InputRequest, Task, TaskStep
cast = seed_cast()
alice, bob = cast["alice"], cast["bob"]
def task(**extra):
    return Task.objects.create(id=secrets.token_urlsafe(24), tenant=alice["tenant"],
        principal=alice["user"], tool_name="echo_task", argument_digest="d", server_build="b",
        policy_revision="p", **extra)
first = task(state="failed")
second = task(retry_of=first)
TaskStep.objects.create(task=first, key="now:1", kind="now", value=1)
Effect.objects.create(task=first, tenant=alice["tenant"], step="deploy", idempotency_key="k",
                      state="applied")
with connection.cursor() as cursor:  # the model has columns (0019) this schema has not yet
    cursor.execute(
        "INSERT INTO mcptasks_inputrequest (task_id, tenant_id, key, method, params, audience, "
        "forbid_self_approval, state, answered_via, created_at, kind, gate, outcome) VALUES "
        "(%s, %s, 'ok', 'm', '{}', 'client', false, 'pending', '', now(), 'form', '{}', '')",
        [second.pk, alice["tenant"].pk])
from mcptasks.models import ApiToken
token, _ = ApiToken.issue(user=alice["user"], tenant=alice["tenant"], issued_by=bob["user"])
third = task(token=token)
with connection.cursor() as cursor:
    cursor.execute(
        "INSERT INTO mcptasks_inputrequest (task_id, tenant_id, key, method, params, audience, "
        "forbid_self_approval, state, answered_via, created_at, kind, gate, outcome) VALUES "
        "(%s, %s, 'gate', 'm', '{}', 'operator', true, 'pending', '', now(), 'form', '{}', '')",
        [third.pk, alice["tenant"].pk])
assign_perm("mcptasks.view_task", bob["user"], second)
with connection.cursor() as cursor:
    cursor.execute("SELECT relkind FROM pg_class WHERE relname = 'mcptasks_task'")
    assert cursor.fetchone()[0] == "r", "not a plain table before 0016"
print(json.dumps({"ids": sorted([first.pk, second.pk, third.pk]), "first": first.pk,
                  "second": second.pk, "third": third.pk}))
"""

AFTER = """
import json, django; django.setup()
from django.db import IntegrityError, connection, transaction
from audit.record import Actor
from mcptasks import lifecycle
from mcptasks.management.commands.seed_demo import seed_cast
from mcptasks.models import Effect, InputRequest, Task, TaskStep, TaskUserObjectPermission
before = json.loads(input())
cast = seed_cast()
alice = cast["alice"]
second = Task.objects.get(pk=before["second"])
new, _ = lifecycle.task_create(spec=lifecycle.NewTask(tenant_id=alice["tenant"].pk,
    principal_id=alice["user"].pk, tool_name="echo_task", arguments={}, policy_revision="t",
    ttl_ms=60000, client_capabilities={}), actor=Actor.system("test"))
Task.objects.filter(pk=new.pk).update(retry_of=second)
def where(pk):
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM mcptasks_task WHERE id = %s", [pk])
        return cursor.fetchone()[0]
try:
    with transaction.atomic():
        TaskStep.objects.create(task_id="no-such-task", key="k", kind="now", value=1)
    refused = False
except IntegrityError:
    refused = True
with connection.cursor() as cursor:
    cursor.execute("SELECT DISTINCT confrelid::regclass::text FROM pg_constraint "
                   "WHERE contype = 'f' AND conparentid = 0 "
                   "AND confrelid::regclass::text LIKE 'mcptasks_task%%'")
    referenced = sorted(row[0] for row in cursor.fetchall())
    cursor.execute("SELECT relkind FROM pg_class WHERE relname = 'mcptasks_task'")
    kind = cursor.fetchone()[0]
print(json.dumps({
    "ids": sorted(Task.objects.exclude(pk=new.pk).values_list("pk", flat=True)),
    "where": sorted({where(pk) for pk in before["ids"]}),
    "new_where": where(new.pk), "new_id": new.pk, "kind": kind,
    "retry_of": Task.objects.get(pk=before["second"]).retry_of_id,
    "steps": TaskStep.objects.filter(task_id=before["first"]).count(),
    "effects": Effect.objects.filter(task_id=before["first"]).count(),
    "inputs": InputRequest.objects.filter(task_id=before["second"]).count(),
    "input_people": [list(InputRequest.objects.filter(task_id=before[name]).values_list(
        "principal_id", "token_issuer_id").get()) for name in ("second", "third")],
    "alice": alice["user"].pk, "bob": cast["bob"]["user"].pk,
    "perms": TaskUserObjectPermission.objects.filter(content_object_id=before["second"]).count(),
    "refused": refused, "referenced": referenced,
}))
"""


@pytest.fixture
def database() -> Iterator[str]:
    """A database of this test, dropped after; its URL."""
    with scratch_database("m0016") as url:
        yield url


def run(url: str, tmp_path: Path, *args: str, stdin: str = "") -> str:
    return run_django(url, tmp_path, *args, stdin=stdin)


def test_partitioning_keeps_every_task_and_what_points_at_it(database: str, tmp_path: Path) -> None:
    run(database, tmp_path, "manage.py", "migrate", "mcptasks", "0015", "--no-input", "-v0")
    before = json.loads(run(database, tmp_path, "-c", BEFORE).strip().splitlines()[-1])
    run(database, tmp_path, "manage.py", "migrate", "--no-input", "-v0")
    after = json.loads(
        run(database, tmp_path, "-c", AFTER, stdin=json.dumps(before)).strip().splitlines()[-1]
    )
    assert after["kind"] == "p"  # partitioned
    assert after["ids"] == before["ids"]
    assert after["where"] == ["mcptasks_task_legacy"]
    assert after["new_id"].startswith("~") and after["new_where"].startswith("mcptasks_task_p")
    assert after["retry_of"] == before["first"]
    assert (after["steps"], after["effects"], after["inputs"], after["perms"]) == (1, 1, 1, 1)
    assert after["input_people"] == [  # filled from their tasks (0019)
        [after["alice"], None],
        [after["alice"], after["bob"]],  # the issuer of the token that created it
    ]
    assert after["refused"]  # a row pointing at no task is refused: the foreign keys hold
    assert after["referenced"] == ["mcptasks_task"]
