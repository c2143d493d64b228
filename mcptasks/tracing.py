"""One OpenTelemetry trace per task (issue 22): request, worker attempts, steps and effects.

Off by default, and then nothing here does more than test one module global: no SDK is set up,
no library is instrumented, no span is made. It is on in a process when OTLP export is
configured (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; README
"Tracing", setting ``MCPTASKS_TRACING``) and :func:`configure` ran there — the web (asgi.py),
each Celery worker (celery.py), the embedded default's ``manage.py serve`` (through asgi.py).

The trace of a task:

- ``tools/call <tool>`` — the request's SERVER span (:func:`request_span`, the ``/mcp`` ASGI app
  is not a Django view); its parent is the client's ``traceparent`` from ``params._meta``
  (PROTOCOL §2.1) or the HTTP header, if it sent one;
- the W3C ``traceparent`` of that span is stored on the task row at creation
  (``Task.traceparent``, lifecycle.task_create; a task created outside a request gets a
  ``task.create`` root span of its own);
- the Celery publish and run spans (opentelemetry-instrumentation-celery) and the SQL
  statements (opentelemetry-instrumentation-psycopg) wherever they happen;
- ``task.attempt <tool>`` — each worker run of the task (:func:`attempt_span`), a child of the
  stored context, so a run joins the task's trace whoever delivered it: a Celery message whose
  headers were lost, the re-delivery sweep, a resume after input or a timer, the embedded
  worker. The span that delivered the run, when it belongs to another trace (the
  ``tasks/update`` that resumed the task, a sweep), is recorded as a link;
- ``task.step <kind> <key>`` / ``task.effect <step>`` — each ``ctx`` step of the attempt
  (:func:`step`), replayed ones marked ``mcptasks.replayed``; a suspension (input, a timer) is
  ``mcptasks.suspended``, not an error.

The trace id is shown on the dashboard's task page beside the correlation id of the logs.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, TypeVar

from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

_PROPAGATOR = TraceContextTextMapPropagator()
# Methods whose request gets a span: those that create, resume or cancel a task (tasks/get is
# polled; a span per poll would bury the task's trace).
TRACED_METHODS = frozenset({"tools/call", "tasks/update", "tasks/cancel"})
SCOPE = "mcptasks"
PROBE_URLS = "healthz,readyz,metrics,static/"

_tracer: trace.Tracer | None = None  # None: tracing is off in this process
_provider: Any = None
_instrumentors: list[Any] = []
_lock = threading.Lock()


def enabled() -> bool:
    return _tracer is not None


def configure(
    *, exporter: Any = None, django: bool = True, libraries: bool = True, role: str = ""
) -> bool:
    """Turn tracing on in this process, once: when ``settings.MCPTASKS_TRACING`` is on (an OTLP
    exporter configured by the standard ``OTEL_*`` variables, batched) or ``exporter`` is given
    (a test's in-memory exporter, exported synchronously). Instruments Django (unless
    ``django`` is False; call it before Django builds its handler), Celery and psycopg (unless
    ``libraries`` is False). Returns whether tracing is on."""
    global _tracer, _provider
    from django.conf import settings

    with _lock:
        if _tracer is not None:
            return True
        if exporter is None and not settings.MCPTASKS_TRACING:
            return False
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        attributes = {"service.version": settings.MCPTASKS_VERSION}
        if not os.environ.get("OTEL_SERVICE_NAME"):
            attributes["service.name"] = "mcptasks"
        if role:
            attributes["mcptasks.process"] = role
        provider = TracerProvider(resource=Resource.create(attributes))
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            # Endpoint, headers, timeout, compression: the standard OTEL_EXPORTER_OTLP_* variables.
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        else:
            provider.add_span_processor(SimpleSpanProcessor(exporter))
        _provider = provider
        _tracer = provider.get_tracer(SCOPE, settings.MCPTASKS_VERSION)
        if libraries:
            _instrument(provider, django=django)
    log.info("tracing on", extra={"otlp": exporter is None, "role": role or "-"})
    return True


def _instrument(provider: Any, *, django: bool) -> None:
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    instrumentors: list[Any] = [CeleryInstrumentor(), PsycopgInstrumentor()]
    if django:
        from opentelemetry.instrumentation.django import DjangoInstrumentor

        instrumentors.append(DjangoInstrumentor())
    for instrumentor in instrumentors:
        if not instrumentor.is_instrumented_by_opentelemetry:
            options: dict[str, Any] = {"tracer_provider": provider}
            if type(instrumentor).__name__ == "DjangoInstrumentor":
                options["request_hook"] = _redact_query
                if not os.environ.get("OTEL_PYTHON_DJANGO_EXCLUDED_URLS"):
                    options["excluded_urls"] = PROBE_URLS  # probes and scrapes: no span each
            instrumentor.instrument(**options)
            _instrumentors.append(instrumentor)


def _redact_query(span: Any, request: Any) -> None:
    """A dashboard request's span keeps its query string as the access log does: the values of
    sensitive parameters (``?access_token=``) replaced (mcptasks.logging)."""
    from mcptasks.logging import redact_request_target

    query = request.META.get("QUERY_STRING") or ""
    if not query or not span.is_recording():
        return
    clean = redact_request_target("?" + query)[1:]
    if clean == query:
        return
    for key, value in dict(getattr(span, "attributes", None) or {}).items():
        if isinstance(value, str) and query in value:
            span.set_attribute(key, value.replace(query, clean))


def shutdown() -> None:
    """Flush and turn tracing off in this process (tests; a process that exits)."""
    global _tracer, _provider
    with _lock:
        for instrumentor in _instrumentors:
            instrumentor.uninstrument()
        _instrumentors.clear()
        if _provider is not None:
            _provider.shutdown()
        _tracer, _provider = None, None


def flush(timeout_ms: int = 5000) -> None:
    if _provider is not None:
        _provider.force_flush(timeout_ms)


# ---------------------------------------------------------------- trace context
def traceparent_of(span: trace.Span) -> str:
    """The W3C ``traceparent`` naming ``span`` ("" for an invalid span)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent", "")


def context_of(traceparent: str) -> Any:
    """An OpenTelemetry context whose parent is ``traceparent`` (None if it is not valid)."""
    if not traceparent:
        return None
    context = _PROPAGATOR.extract({"traceparent": traceparent})
    if not trace.get_current_span(context).get_span_context().is_valid:
        return None
    return context


def trace_id_of(traceparent: str) -> str:
    """The 32 hex digits of the trace id in a ``traceparent`` ("" if it has none)."""
    parts = (traceparent or "").split("-")
    return parts[1] if len(parts) >= 4 and len(parts[1]) == 32 else ""


def _incoming_context(meta: Any, headers: dict[str, str]) -> Any:
    """The caller's trace context: ``params._meta`` first (the MCP way), then HTTP headers."""
    carrier: dict[str, str] = {}
    if isinstance(meta, dict) and isinstance(meta.get("traceparent"), str):
        carrier["traceparent"] = meta["traceparent"][:128]
        if isinstance(meta.get("tracestate"), str):
            carrier["tracestate"] = meta["tracestate"][:512]
    elif headers.get("traceparent"):
        carrier["traceparent"] = headers["traceparent"][:128]
        if headers.get("tracestate"):
            carrier["tracestate"] = headers["tracestate"][:512]
    return _PROPAGATOR.extract(carrier) if carrier else None


# ---------------------------------------------------------------- spans
@contextmanager
def _request_span(method: str, params: dict[str, Any], headers: dict[str, str]) -> Iterator[Any]:
    assert _tracer is not None
    name = params.get("name") if method == "tools/call" else None
    attributes: dict[str, Any] = {"mcp.method.name": method, "rpc.system": "jsonrpc"}
    if isinstance(name, str):
        attributes["gen_ai.tool.name"] = name[:200]
    task_id = params.get("taskId")
    if isinstance(task_id, str):
        attributes["mcptasks.task_id"] = task_id[:64]
    with _tracer.start_as_current_span(
        f"{method} {name[:200]}" if isinstance(name, str) else method,
        context=_incoming_context(params.get("_meta"), headers),
        kind=SpanKind.SERVER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except Exception as exc:
            code = getattr(exc, "code", None)
            if isinstance(code, int):
                span.set_attribute("rpc.jsonrpc.error_code", code)
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise


def request_span(
    method: str, params: dict[str, Any], headers: dict[str, str]
) -> AbstractContextManager[Any]:
    """The span of one MCP request of :data:`TRACED_METHODS` (a no-op otherwise, or when off)."""
    if _tracer is None or method not in TRACED_METHODS:
        return nullcontext()
    return _request_span(method, params, headers)


def note_result(span: Any, result: Any) -> None:
    """Record on a request span the task a ``tools/call`` created."""
    if span is not None and isinstance(result, dict) and isinstance(result.get("taskId"), str):
        span.set_attribute("mcptasks.task_id", result["taskId"])


def new_task_traceparent(tool_name: str) -> str:
    """The trace context to store on a task being created: the current span's (the
    ``tools/call`` request's), else that of a ``task.create`` root span made for it (a task
    created by a script or the REST API without a trace); "" when tracing is off."""
    if _tracer is None:
        return ""
    current = trace.get_current_span()
    if current.get_span_context().is_valid:
        return traceparent_of(current)
    span = _tracer.start_span("task.create", attributes={"mcptasks.tool": tool_name})
    span.end()
    return traceparent_of(span)


@contextmanager
def _attempt_span(task: Any, started_ns: int | None) -> Iterator[Any]:
    assert _tracer is not None
    current = trace.get_current_span().get_span_context()
    stored = context_of(task.traceparent)
    parent, links = None, []
    if stored is None:
        parent = None  # a task created while tracing was off: this run starts its own trace
    elif current.is_valid and current.trace_id == trace_id_of_context(stored):
        parent = None  # delivered within the task's trace (its Celery headers): nest under it
    else:
        parent = stored
        if current.is_valid:
            links.append(Link(current, {"mcptasks.link": "delivered by"}))
    with _tracer.start_as_current_span(
        f"task.attempt {task.tool_name}",
        context=parent,
        links=links,
        start_time=started_ns,
        attributes={
            "mcptasks.task_id": task.pk,
            "mcptasks.tool": task.tool_name,
            "mcptasks.attempt": task.attempt,
            "mcptasks.tenant": task.tenant.slug,
            "mcptasks.correlation_id": task.correlation_id,
            "mcptasks.worker": task.lease_owner,
        },
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except Exception as exc:
            _record_error(span, exc)
            raise


def trace_id_of_context(context: Any) -> int:
    return int(trace.get_current_span(context).get_span_context().trace_id)


def attempt_span(task: Any, started_ns: int | None = None) -> AbstractContextManager[Any]:
    """The span of one worker attempt of ``task`` (claimed), parented by the trace context
    stored on the task row; ``started_ns`` backdates it to before the claim."""
    if _tracer is None:
        return nullcontext()
    return _attempt_span(task, started_ns)


def note_outcome(span: Any, state: str | None, error_class: Callable[[], str]) -> None:
    """Record how an attempt left its task (``mcptasks.outcome``); a failure is an error named
    by the failure's exception class (``error_class()``, read only when tracing is on and the
    task failed)."""
    if span is None:
        return
    span.set_attribute("mcptasks.outcome", state or "abandoned")
    if state == "failed":
        span.set_status(Status(StatusCode.ERROR, error_class() or "failed"))


def _record_error(span: Any, exc: BaseException) -> None:
    """An error on a span: its exception *type* only. The text may carry anything (failures.py
    keeps it only in the redacted log line, found by the correlation id)."""
    kind = type(exc)
    name = (
        kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    )
    span.add_event("exception", {"exception.type": name})
    span.set_status(Status(StatusCode.ERROR, name))


def now_ns() -> int | None:
    return time.time_ns() if _tracer is not None else None


def _step_key(kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    first = args[0] if args else kwargs.get("step", kwargs.get("key", kwargs.get("questions")))
    if isinstance(first, dict):
        return ",".join(str(key) for key in first)[:200]
    return str(first)[:200] if first is not None else ""


def step(kind: str) -> Callable[[F], F]:
    """Decorate a ``ctx`` method of the task context: each call is a span of the attempt."""
    from mcptasks.tools.context import Suspend

    def decorate(method: F) -> F:
        @functools.wraps(method)
        def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
            if _tracer is None or not trace.get_current_span().get_span_context().is_valid:
                # Off, or a run that began before tracing was (no attempt span to hang it on).
                return method(self, *args, **kwargs)
            key = _step_key(kind, args, kwargs)
            name = f"task.effect {key}" if kind == "effect" else f"task.step {kind} {key}".strip()
            replaying = len(self.sequence) < len(self.recorded_log)
            with _tracer.start_as_current_span(
                name,
                attributes={
                    "mcptasks.step.kind": kind,
                    "mcptasks.step.key": key,
                    "mcptasks.replayed": replaying,
                },
                record_exception=False,
                set_status_on_exception=False,
            ) as span:
                try:
                    return method(self, *args, **kwargs)
                except Suspend as suspension:
                    span.set_attribute("mcptasks.suspended", type(suspension).__name__)
                    raise
                except Exception as exc:
                    _record_error(span, exc)
                    raise

        return traced  # type: ignore[return-value]

    return decorate
