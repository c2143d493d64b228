"""Transient database failures (issue 20, point 6), on PostgreSQL: a backend terminated in the
middle of a request. Reads (and cancel) are retried on a fresh connection and answer normally,
and so is a write that had sent no writing statement yet (its outcome is known: nothing was
applied); a write that may have committed is not repeated and says its outcome is unknown."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.db import OperationalError, connection

from mcptasks import access, db_retry
from mcptasks.lifecycle import creation as lifecycle_creation
from mcptasks.models import Task
from tests.faults import downstream
from tests.protocol.conftest import McpClient

pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


def _terminate_own_backend() -> None:
    """Terminate the PostgreSQL backend of this thread's connection, from another session."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    with psycopg.connect(downstream.conninfo(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", (pid,))


@pytest.fixture
def terminate_once(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Any, str], list[int]]]:
    """``terminate_once(module, name)``: the first call of ``module.name`` terminates the
    backend its request is using, then proceeds (and fails on the dead connection)."""

    def install(module: Any, name: str) -> list[int]:
        original = getattr(module, name)
        calls: list[int] = []

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            if len(calls) == 1:
                _terminate_own_backend()
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)
        return calls

    yield install


def test_a_read_is_retried_on_a_fresh_connection() -> None:
    calls = []

    def read() -> int:
        calls.append(1)
        if len(calls) == 1:
            _terminate_own_backend()
        return Task.objects.count()

    assert db_retry.run(read, safe=True, what="a read") == 0
    assert len(calls) == 2


def test_an_unsafe_call_that_may_have_written_is_not_repeated() -> None:
    calls = []

    def write() -> int:
        calls.append(1)
        Task.objects.filter(pk="no-such-task").update(status_message="x")  # a write was sent
        _terminate_own_backend()
        return Task.objects.count()

    with pytest.raises(OperationalError) as failure:
        db_retry.run(write, safe=False, what="a write")
    assert len(calls) == 1
    assert not db_retry.repeat_safe(failure.value)
    assert Task.objects.count() == 0  # the next query has a fresh connection


def test_an_unsafe_call_that_wrote_nothing_yet_is_repeated() -> None:
    calls = []

    def write() -> int:
        calls.append(1)
        if len(calls) == 1:
            _terminate_own_backend()  # the next statement, a read, fails: nothing was written
        Task.objects.count()
        return Task.objects.filter(pk="no-such-task").update(status_message="x")

    assert db_retry.run(write, safe=False, what="a write") == 0
    assert len(calls) == 2


def test_may_write_tells_reads_from_writes() -> None:
    assert not db_retry.may_write('SELECT "t"."id" FROM "t" WHERE "t"."id" = %s FOR UPDATE')
    assert not db_retry.may_write("SAVEPOINT s1")
    assert db_retry.may_write('UPDATE "t" SET "x" = 1')
    assert db_retry.may_write('INSERT INTO "t" VALUES (1)')
    assert db_retry.may_write("WITH head AS (UPDATE h SET seq = seq + 1 RETURNING seq) SELECT 1")
    assert not db_retry.may_write("WITH x AS (SELECT 1) SELECT * FROM x")


def test_tasks_get_survives_a_terminated_backend(
    mcp: McpClient, make_task: Callable[..., Task], terminate_once: Any, settings: Any
) -> None:
    settings.MCPTASKS_FAST_TASKS_GET = False  # the general path, in a pool thread
    task = make_task()
    calls = terminate_once(access.tasks, "get_visible_task")

    reply = mcp.call("tasks/get", {"taskId": task.pk})

    assert reply.status == 200, reply.body
    assert reply.result["taskId"] == task.pk
    assert len(calls) == 2


def test_tasks_update_failing_before_any_write_is_retried(
    mcp: McpClient, make_task: Callable[..., Task], terminate_once: Any
) -> None:
    task = make_task()
    calls = terminate_once(access, "answerable_requests")

    reply = mcp.call("tasks/update", {"taskId": task.pk, "inputResponses": {"q": {}}})

    assert reply.status == 200, reply.body
    assert "error" not in reply.body, reply.body  # answered as without the failure
    assert len(calls) == 2  # repeated: only reads had been sent


def test_tools_call_hit_after_its_insert_says_its_outcome_is_unknown(
    mcp: McpClient, terminate_once: Any
) -> None:
    calls = terminate_once(lifecycle_creation, "_audit")  # after the task's INSERT, before commit

    reply = mcp.tool("echo_task", {"text": "once"})

    assert reply.status == 200, reply.body
    assert reply.error["code"] == -32603
    assert reply.error["data"] == {"outcome": "unknown", "retrySafe": False}
    assert "unknown" in reply.error["message"]
    assert len(calls) == 1  # not repeated
    assert Task.objects.count() == 0  # its transaction never committed
