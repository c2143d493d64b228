"""Failures that explain themselves (issue 22): a tool raising ValueError mid-run records the
exception class, the failing step and a correlation id found in the task's log lines (web and
worker); the task page shows them; an operator's retry re-runs from the failed step as a new
task without repeating the effect already applied."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from audit.models import AuditEvent
from mcptasks import runner
from mcptasks.logging import formatter
from mcptasks.models import Effect, EffectState, Task, TaskState, Tenant
from mcptasks.tools.registry import ToolDef, registry

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    """The server's log lines, as production writes them (JSON, structlog context). On the
    ``mcptasks`` logger: the root logger is configured again when the first job runs."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter("json"))
    server = logging.getLogger("mcptasks")
    server.addHandler(handler)
    previous = server.level
    server.setLevel(logging.INFO)
    yield stream
    server.removeHandler(handler)
    server.setLevel(previous)


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_value_error_mid_run_is_explained_and_retried_from_the_failed_step(
    start_task, run_jobs, probes, users, log_lines
):
    probes.FLAGS["ship_fails"] = True
    task_id = start_task("charge_then_ship", {"order": "o-42"})
    run_jobs()

    task = Task.objects.get(pk=task_id)
    assert task.state == TaskState.FAILED
    assert task.error["code"] == -32603 and "ValueError" not in task.error["message"]
    failure = task.failure
    assert failure["error_class"] == "ValueError"
    assert failure["step"] == "effect:ship"
    assert "o-42" not in json.dumps(failure)  # the exception's text stays in the log line
    assert failure["correlation_id"] == task.correlation_id != ""

    lines = [json.loads(line) for line in log_lines.getvalue().splitlines() if line.strip()]
    of_task = [line for line in lines if line.get("correlation_id") == task.correlation_id]
    assert any(line["event"] == "tool raised" for line in of_task), ("worker line", lines[-5:])
    # The web side: the tools/call request that created the task (its request id is the
    # task's correlation id); the worker side: the run that failed.
    created = [line for line in of_task if line["event"] == "task created"]
    assert created and created[0]["request_id"] == task.correlation_id, lines

    olga = signed_in(users["olga"])
    page = olga.get(reverse("dashboard:task", args=[task_id]))
    assert page.status_code == 200
    html = page.content.decode()
    for shown in ("ValueError", "effect:ship", task.correlation_id, "Retry from the failed step"):
        assert shown in html, shown

    # The owner may not retry (operators do); nothing changes.
    alice = signed_in(users["alice"])
    assert alice.post(reverse("dashboard:retry", args=[task_id])).status_code == 403
    assert Task.objects.count() == 1

    probes.FLAGS["ship_fails"] = False
    reply = olga.post(reverse("dashboard:retry", args=[task_id]))
    assert reply.status_code == 302
    retry = Task.objects.get(retry_of_id=task_id)
    assert reply["Location"].startswith(reverse("dashboard:task", args=[retry.pk]))
    run_jobs()

    retry.refresh_from_db()
    assert retry.state == TaskState.COMPLETED
    assert retry.result["structuredContent"]["charged"] == {"step": "charge", "call": 1}
    assert probes.EFFECT_CALLS["charge"] == 1, "the applied effect was repeated"
    assert probes.EFFECT_CALLS["ship"] == 2  # the failed step ran again
    assert Effect.objects.get(task=retry, step="charge").state == EffectState.APPLIED
    assert retry.correlation_id == task.correlation_id
    assert Task.objects.get(pk=task_id).state == TaskState.FAILED  # terminal stays terminal
    retried = AuditEvent.objects.get(task_id=task_id, action="task.retried")
    assert retried.data["retry_task_id"] == retry.pk and retried.actor_kind == "operator"
    assert AuditEvent.objects.filter(task_id=retry.pk, action="task.retry_of").exists()

    # A completed task is not retryable: refused, nothing created.
    again = olga.post(reverse("dashboard:retry", args=[retry.pk]), follow=True)
    assert "cannot retry" in again.content.decode()
    assert Task.objects.count() == 2


def test_a_tool_that_leaves_a_transaction_open_fails_and_its_writes_are_rolled_back(
    make_task, monkeypatch
):
    def leaves_a_transaction(ctx: Any) -> str:
        connection.set_autocommit(False)
        Tenant.objects.filter(slug="acme").update(name="written, never committed")
        return "done"

    registry.ensure_loaded()
    tool = ToolDef(
        name="leaves_a_transaction",
        fn=leaves_a_transaction,
        description="turns autocommit off and returns",
        input_schema={"type": "object"},
        policy="task",
        pack="tests.toolpack",  # a configured pack: the registry serves only those
    )
    monkeypatch.setitem(registry._tools, tool.name, tool)
    task_id = make_task(tool_name=tool.name).pk
    runner.run_task(task_id)

    assert connection.get_autocommit()
    task = Task.objects.get(pk=task_id)
    assert task.state == TaskState.FAILED
    assert "left a database transaction open" in task.error["message"]
    assert Tenant.objects.get(slug="acme").name != "written, never committed"
    assert AuditEvent.objects.filter(task_id=task_id, action="task.failed").exists()
