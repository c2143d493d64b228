"""One trace per task (issue 22), on the embedded default: the ``tools/call`` request, each
worker attempt (the first run and the resume after a durable sleep) and each step and effect are
spans of one trace, whose id the task row and the task page carry. Off by default.

(Across a real Celery worker process on PostgreSQL + Redis: tests/faults/test_tracing.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import time_machine
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mcptasks import sweeps, tracing
from mcptasks.models import Task, TaskState
from tests.protocol.conftest import McpClient

pytestmark = pytest.mark.django_db(transaction=True)

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_TRACEPARENT = f"00-{CLIENT_TRACE}-b7ad6b7169203331-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on in this process, into memory (no library instrumented: SQLite, no Celery)."""
    exporter = InMemorySpanExporter()
    assert tracing.configure(exporter=exporter, libraries=False)
    yield exporter
    tracing.shutdown()


def run_pipeline(client: McpClient, run_jobs: Any, meta: dict[str, Any] | None = None) -> Task:
    """tools/call traced_pipeline; its first run (up to the durable sleep), then the resume."""
    params: dict[str, Any] = {"name": "traced_pipeline", "arguments": {"nap_s": 60}}
    if meta:
        params["_meta"] = {**client_meta(), **meta}
    reply = client.call("tools/call", params)
    task_id = reply.result["taskId"]
    run_jobs()
    assert Task.objects.get(pk=task_id).state == TaskState.SLEEPING
    with time_machine.travel(timezone.now() + timedelta(seconds=61)):
        assert sweeps.wake_timers() == 1
        run_jobs()
    task = Task.objects.get(pk=task_id)
    assert task.state == TaskState.COMPLETED
    return task


def client_meta() -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}}
        },
    }


def test_one_trace_from_tools_call_through_completion_on_the_embedded_default(
    spans, cast, run_jobs
):
    task = run_pipeline(McpClient(cast["alice"]["token"]), run_jobs)

    finished = spans.get_finished_spans()
    assert task.trace_id and {format(s.context.trace_id, "032x") for s in finished} == {
        task.trace_id
    }
    by_name: dict[str, list[Any]] = {}
    for span in finished:
        by_name.setdefault(span.name, []).append(span)
    (request,) = by_name["tools/call traced_pipeline"]
    assert request.parent is None  # the client sent no trace context: the request is the root
    assert request.attributes["mcptasks.task_id"] == task.pk
    assert task.traceparent.startswith(f"00-{task.trace_id}-{request.context.span_id:016x}-")
    attempts = sorted(by_name["task.attempt traced_pipeline"], key=lambda s: s.start_time)
    # The resume was delivered by the timer sweep, not by the request: it joins all the same.
    assert [a.attributes["mcptasks.attempt"] for a in attempts] == [1, 2]
    assert all(a.parent.span_id == request.context.span_id for a in attempts)
    assert [a.attributes["mcptasks.outcome"] for a in attempts] == ["sleeping", "completed"]
    assert attempts[0].attributes["mcptasks.correlation_id"] == task.correlation_id

    def steps_of(attempt: Any) -> list[tuple[str, bool]]:
        return [
            (s.name, s.attributes["mcptasks.replayed"])
            for s in sorted(finished, key=lambda s: s.start_time)
            if s.parent is not None and s.parent.span_id == attempt.context.span_id
        ]

    assert steps_of(attempts[0]) == [
        ("task.step uuid", False),
        ("task.effect build", False),
        ("task.step sleep cool-down", False),
    ]
    assert steps_of(attempts[1]) == [
        ("task.step uuid", True),
        ("task.effect build", True),
        ("task.step sleep cool-down", True),
        ("task.effect ship", False),
    ]
    (first_sleep,) = [
        s
        for s in by_name["task.step sleep cool-down"]
        if s.parent.span_id == attempts[0].context.span_id
    ]
    assert first_sleep.attributes["mcptasks.suspended"] == "Suspend"
    assert first_sleep.status.is_unset  # a suspension is not an error


def test_a_clients_trace_context_in_meta_is_continued(spans, cast, run_jobs):
    task = run_pipeline(
        McpClient(cast["alice"]["token"]), run_jobs, meta={"traceparent": CLIENT_TRACEPARENT}
    )
    assert task.trace_id == CLIENT_TRACE
    (request,) = [s for s in spans.get_finished_spans() if s.name.startswith("tools/call")]
    assert request.parent.span_id == int("b7ad6b7169203331", 16)
    assert {format(s.context.trace_id, "032x") for s in spans.get_finished_spans()} == {
        CLIENT_TRACE
    }


def test_a_failed_step_marks_its_attempt_as_an_error_naming_only_the_exception_class(
    spans, cast, run_jobs
):
    from tests import toolpack

    toolpack.FLAGS["ship_fails"] = True
    try:
        reply = McpClient(cast["alice"]["token"]).call(
            "tools/call", {"name": "charge_then_ship", "arguments": {"order": "o-secret-7"}}
        )
        run_jobs()
    finally:
        toolpack.FLAGS.pop("ship_fails", None)
    task = Task.objects.get(pk=reply.result["taskId"])
    assert task.state == TaskState.FAILED
    finished = spans.get_finished_spans()
    (attempt,) = [s for s in finished if s.name.startswith("task.attempt")]
    (ship,) = [s for s in finished if s.name == "task.effect ship"]
    assert attempt.status.status_code.name == "ERROR"
    assert attempt.status.description == "ValueError"
    assert ship.status.description == "ValueError"
    assert [e.attributes["exception.type"] for e in ship.events] == ["ValueError"]
    # The exception's text (which may carry anything) is not exported.
    assert "o-secret-7" not in repr([(s.attributes, s.events, s.status) for s in finished])


def test_the_task_page_shows_the_trace_id_beside_the_correlation_id(spans, cast, run_jobs):
    task = run_pipeline(McpClient(cast["alice"]["token"]), run_jobs)
    client = Client()
    client.force_login(cast["alice"]["user"])
    html = client.get(reverse("dashboard:task", args=[task.pk]), secure=True).content.decode()
    assert f'data-trace-id="{task.trace_id}"' in html
    assert task.correlation_id in html


def test_tracing_is_off_by_default_and_a_task_then_has_no_trace(cast, run_jobs):
    from django.conf import settings

    assert not settings.MCPTASKS_TRACING and not tracing.enabled()
    reply = McpClient(cast["alice"]["token"]).call(
        "tools/call", {"name": "echo_task", "arguments": {"text": "x"}}
    )
    run_jobs()
    task = Task.objects.get(pk=reply.result["taskId"])
    assert task.state == TaskState.COMPLETED
    assert (task.traceparent, task.trace_id) == ("", "")


@pytest.mark.parametrize(
    ("environment", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"},
            False,
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
                "OTEL_TRACES_EXPORTER": "none",
            },
            False,
        ),
        ({"MCPTASKS_TRACING": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, False),
    ],
)
def test_tracing_is_on_when_otlp_export_is_configured(environment, on):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OTEL_", "MCPTASKS_TRACING", "DATABASE_URL", "REDIS_URL"))
    }
    env.update({"DJANGO_SETTINGS_MODULE": "mcptasks.settings", **environment})
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from django.conf import settings; print(settings.MCPTASKS_TRACING)",
        ],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == str(on)


def test_a_dashboard_request_span_keeps_no_secret_of_its_query_string(cast):
    exporter = InMemorySpanExporter()
    assert tracing.configure(exporter=exporter)  # Django instrumented: a new Client sees it
    try:
        client = Client()
        client.force_login(cast["olga"]["user"])
        client.get("/tasks/?q=deploy&access_token=sup3r-secret-value", secure=True)
    finally:
        tracing.shutdown()
    finished = exporter.get_finished_spans()
    assert finished, "the Django request made no span"
    dumped = repr([dict(s.attributes or {}) for s in finished])
    assert "q=deploy" in dumped and "sup3r-secret-value" not in dumped


def test_dashboard_requests_over_asgi_are_traced_and_probes_are_not(cast):
    import asyncio

    import httpx
    from django.core.asgi import get_asgi_application

    exporter = InMemorySpanExporter()
    assert tracing.configure(exporter=exporter)
    try:
        app = get_asgi_application()  # built after instrumenting, as asgi.py does

        async def get(path: str) -> int:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="https://127.0.0.1") as c:
                return (await c.get(path)).status_code

        assert asyncio.run(get("/login/")) == 200
        asyncio.run(get("/healthz"))
    finally:
        tracing.shutdown()
    assert [s.name for s in exporter.get_finished_spans()] == ["GET login/"]
