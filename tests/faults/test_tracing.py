"""One trace per task across processes (issue 22), on PostgreSQL + Redis with a real Celery
worker: the ``tools/call`` request (this process, an in-memory span exporter), the Celery
publish, and in the worker process its Celery run spans, each attempt, each step and effect and
their SQL statements (exported over OTLP/HTTP to a receiver in this test) share one trace id —
that of the task row. A task whose Celery message was lost, run by the re-delivery sweep, and a
resume after a durable sleep join their task's trace all the same."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mcptasks import tracing
from tests.faults import harness
from tests.faults.harness import wait_for
from tests.protocol.conftest import McpClient

pytestmark = [
    pytest.mark.live,
    pytest.mark.pg,
    pytest.mark.redis,
    pytest.mark.django_db(transaction=True),
]


class Received:
    """Spans a worker exported over OTLP/HTTP: ``(trace id, span id, parent id, name,
    attributes, links, service name)``, hex ids."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def add(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            service = next(
                (
                    a.value.string_value
                    for a in resource_spans.resource.attributes
                    if a.key == "service.name"
                ),
                "",
            )
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    attributes = {a.key: _value(a.value) for a in span.attributes}
                    with self.lock:
                        self.spans.append(
                            {
                                "trace_id": span.trace_id.hex(),
                                "span_id": span.span_id.hex(),
                                "parent_id": span.parent_span_id.hex(),
                                "name": span.name,
                                "attributes": attributes,
                                "links": [link.trace_id.hex() for link in span.links],
                                "service": service,
                            }
                        )

    def of_trace(self, trace_id: str) -> list[dict[str, Any]]:
        with self.lock:
            return [s for s in self.spans if s["trace_id"] == trace_id]


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@pytest.fixture
def otlp_receiver() -> Iterator[tuple[str, Received]]:
    """An OTLP/HTTP trace receiver on a free port of 127.0.0.1 (stopped after the test)."""
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path == "/v1/traces":
                received.add(body)
            payload = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def web_spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on in this process (the web side: the /mcp app, Celery publish, psycopg)."""
    exporter = InMemorySpanExporter()
    assert tracing.configure(exporter=exporter, django=False)
    yield exporter
    tracing.shutdown()


def hex_trace(span: Any) -> str:
    return format(span.context.trace_id, "032x")


def test_one_trace_per_task_from_tools_call_through_a_worker_process(
    make_cluster: Any,
    shared_broker: tuple[str, str],
    otlp_receiver: tuple[str, Received],
    web_spans: InMemorySpanExporter,
    cast: dict[str, Any],
) -> None:
    from mcptasks.models import Task, TaskState

    endpoint, received = otlp_receiver
    cluster = make_cluster(*shared_broker)
    cluster.extra_env.update(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_SERVICE_NAME": "mcptasks-worker",
        }
    )
    client = McpClient(cast["alice"]["token"])

    # A task whose Celery message is lost before any worker runs: the sweep re-delivers it.
    lost = client.tool("echo_task", {"text": "lost message"}).result["taskId"]
    harness.flush_redis(shared_broker[0])
    cluster.start_worker("A")
    cluster.start_beat()
    pipeline = client.tool("traced_pipeline", {"nap_s": 1.0}).result["taskId"]

    def done(task_id: str) -> bool:
        return Task.objects.get(pk=task_id).state == TaskState.COMPLETED

    wait_for(lambda: done(pipeline), 60, "the traced pipeline to complete")
    wait_for(lambda: done(lost), 60, "the sweep to re-deliver and run the lost task")

    task = Task.objects.get(pk=pipeline)
    assert task.trace_id
    local = [s for s in web_spans.get_finished_spans() if hex_trace(s) == task.trace_id]
    (request,) = [s for s in local if s.name == "tools/call traced_pipeline"]
    assert "apply_async/mcptasks.run_task" in {s.name for s in local}  # the publish, traced
    # (This process's SQL is not traced: its pooled connections predate the instrumentation.)

    def worker_names(trace_id: str) -> list[str]:
        return [s["name"] for s in received.of_trace(trace_id)]

    wait_for(
        lambda: (
            worker_names(task.trace_id).count("task.attempt traced_pipeline") == 2
            and "task.effect ship" in worker_names(task.trace_id)
        ),
        30,
        "the worker's spans of both attempts over OTLP",
    )
    remote = received.of_trace(task.trace_id)
    assert {s["service"] for s in remote} == {"mcptasks-worker"}
    names = [s["name"] for s in remote]
    assert "run/mcptasks.run_task" in names  # Celery's consumer span, in the same trace
    for expected in ("task.step uuid", "task.effect build", "task.step sleep cool-down"):
        assert expected in names
    attempts = sorted(
        (s for s in remote if s["name"] == "task.attempt traced_pipeline"),
        key=lambda s: s["attributes"]["mcptasks.attempt"],
    )
    assert [a["attributes"]["mcptasks.outcome"] for a in attempts] == ["sleeping", "completed"]
    # The SQL of the worker's steps is in the trace too (psycopg instrumentation).
    assert any(s["attributes"].get("db.system") == "postgresql" for s in remote)
    # Every worker span descends from the tools/call request of this process.
    by_id = {s["span_id"]: s for s in remote}
    local_ids = {format(s.context.span_id, "016x") for s in local}
    for span in remote:
        node = span
        while node["parent_id"] in by_id:
            node = by_id[node["parent_id"]]
        assert node["parent_id"] in local_ids, f"{span['name']} is not under the request"
    assert format(request.context.span_id, "016x") in local_ids

    # The re-delivered task: its attempt joined its own trace, linked to the sweep's delivery.
    lost_task = Task.objects.get(pk=lost)
    wait_for(
        lambda: "task.attempt echo_task" in worker_names(lost_task.trace_id),
        30,
        "the re-delivered attempt's span",
    )
    (lost_request,) = [
        s
        for s in web_spans.get_finished_spans()
        if s.name == "tools/call echo_task" and hex_trace(s) == lost_task.trace_id
    ]
    (lost_attempt,) = [
        s for s in received.of_trace(lost_task.trace_id) if s["name"] == "task.attempt echo_task"
    ]
    assert lost_attempt["parent_id"] == format(lost_request.context.span_id, "016x")
    assert lost_attempt["links"] and lost_attempt["links"][0] != lost_task.trace_id
