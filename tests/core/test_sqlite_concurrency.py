"""The embedded default's SQLite takes concurrent lifecycle writers without "database is locked"
(DESIGN §9: WAL, IMMEDIATE transactions, a busy timeout)."""

from __future__ import annotations

import threading
import traceback

import pytest
from django.conf import settings
from django.db import connection

from audit.models import AuditEvent
from audit.record import Actor
from mcptasks import lifecycle
from mcptasks.models import Task, TaskState

pytestmark = [
    pytest.mark.skipif(
        not settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"),
        reason="SQLite-only: the embedded default's locking (DATABASE_URL selects PostgreSQL)",
    ),
    pytest.mark.django_db(transaction=True),
]

THREADS = 8
TASKS_PER_THREAD = 25


def test_concurrent_lifecycle_writers_never_hit_database_is_locked(cast):
    owners = [cast["alice"], cast["bob"]]
    barrier = threading.Barrier(THREADS)
    errors: list[str] = []
    created: list[str] = []

    def writer(number: int) -> None:
        owner = owners[number % len(owners)]
        try:
            barrier.wait(timeout=10)
            for _ in range(TASKS_PER_THREAD):
                task, _ = lifecycle.task_create(
                    spec=lifecycle.NewTask(
                        tenant_id=owner["tenant"].pk,
                        principal_id=owner["user"].pk,
                        tool_name="echo_task",
                        arguments={"writer": number},
                        policy_revision="test",
                    ),
                    actor=Actor.for_user(owner["user"], kind="principal"),
                )
                task = lifecycle.task_claim(task_id=task.pk, worker=f"writer-{number}")
                lifecycle.task_complete(
                    task_id=task.pk, attempt=task.attempt, result={"content": []}
                )
                created.append(task.pk)
        except BaseException:
            errors.append(traceback.format_exc())
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert not any(thread.is_alive() for thread in threads)
    assert not [e for e in errors if "database is locked" in e]
    assert errors == []
    assert len(created) == THREADS * TASKS_PER_THREAD
    stored = dict(Task.objects.filter(pk__in=created).values_list("pk", "state"))
    assert len(stored) == len(created)
    assert set(stored.values()) == {TaskState.COMPLETED}
    actions = list(AuditEvent.objects.filter(task_id__in=created).values_list("action", flat=True))
    assert sorted(set(actions)) == ["task.completed", "task.created", "task.started"]
    assert len(actions) == 3 * len(created)
    for chain in ("tenant:acme", "tenant:globex"):
        seqs = list(
            AuditEvent.objects.filter(chain=chain).order_by("seq").values_list("seq", flat=True)
        )
        assert seqs == list(range(1, len(seqs) + 1)), chain
