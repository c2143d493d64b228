"""Prometheus metrics (prometheus-client).

Counters and histograms use the client's multiprocess mode when ``PROMETHEUS_MULTIPROC_DIR`` is
set (every process of a host writes there; any one of them serves the sum). Task gauges are
derived from the database at scrape time, so every web process reports the same totals.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db.models import Count
from django.utils import timezone
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from mcptasks.plans import written

TRANSITIONS = Counter("mcptasks_transitions_total", "Task state transitions", ["verb"])
TASK_CREATE_SECONDS = Histogram(
    "mcptasks_task_create_seconds",
    "tools/call to committed CreateTaskResult",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
TASKS_GET_SECONDS = Histogram(
    "mcptasks_tasks_get_seconds",
    "tasks/get handling time",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25),
)
TASKS_GET_PATH = Counter(
    "mcptasks_tasks_get_total",
    "tasks/get answered, by path: fast (on the event loop) or general (worker thread)",
    ["path"],
)
TASKS_GET_FAST = TASKS_GET_PATH.labels(path="fast")
TASKS_GET_GENERAL = TASKS_GET_PATH.labels(path="general")
THROTTLED = Counter("mcptasks_throttled_total", "Requests answered 429", ["kind"])
MISSING_MCP_NAME = Counter(
    "mcptasks_missing_mcp_name_total", "tasks/* requests without Mcp-Name (tolerated, PROTOCOL §9)"
)
# The outbox (mcptasks/outbox/): sends by destination kind; lag and backlog are gauges read
# from the database at scrape time (mcptasks.outbox.stats).
OUTBOX_DELIVERED = Counter(
    "mcptasks_outbox_delivered_total", "Deliveries sent and acknowledged", ["kind"]
)
OUTBOX_FAILURES = Counter(
    "mcptasks_outbox_failures_total", "Delivery attempts that failed", ["kind"]
)
OUTBOX_DEAD = Counter("mcptasks_outbox_dead_letters_total", "Deliveries dead-lettered", ["kind"])
OUTBOX_DELIVERY_SECONDS = Histogram(
    "mcptasks_outbox_delivery_seconds",
    "From the outbox row's commit to its acknowledged delivery",
    ["kind"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600),
)
LISTEN_STREAMS = Gauge(
    "mcptasks_listen_streams", "Open subscriptions/listen streams", multiprocess_mode="livesum"
)


class EndedCounts:
    """The ended tasks by state, counted at most every ``MCPTASKS_METRICS_ENDED_COUNT_S`` per
    process: they are most of the task table, so counting them reads every row, while the
    active states are counted at every scrape from the rows in those states alone."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._read_at: float | None = None

    def get(self) -> dict[str, int]:
        from mcptasks.models import TERMINAL_STATES, Task

        with self._lock:
            now = time.monotonic()
            due = settings.MCPTASKS_METRICS_ENDED_COUNT_S
            if self._read_at is None or now - self._read_at >= due:
                self._counts = _counts_by_state(Task.objects.filter(state__in=TERMINAL_STATES))
                self._read_at = now
            return self._counts

    def clear(self) -> None:
        with self._lock:
            self._read_at = None


ENDED_COUNTS = EndedCounts()


def _counts_by_state(tasks: Any) -> dict[str, int]:
    return dict(tasks.values_list("state").annotate(n=Count("pk")).order_by())


class DatabaseCollector(Collector):
    """Gauges read from PostgreSQL/SQLite at scrape time (correct across processes)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        from mcptasks.models import ACTIVE_STATES, Effect, EffectState, Task, TaskState

        by_state = GaugeMetricFamily(
            "mcptasks_tasks",
            "Tasks by internal state (the ended states' counts at most "
            "MCPTASKS_METRICS_ENDED_COUNT_S old)",
            labels=["state"],
        )
        counts = {
            # Written in (plans.written): a prepared statement's plan reads those rows alone.
            **_counts_by_state(
                Task.objects.filter(state__in=[written(state) for state in sorted(ACTIVE_STATES)])
            ),
            **ENDED_COUNTS.get(),
        }
        for state in TaskState:
            by_state.add_metric([state.value], counts.get(state.value, 0))
        yield by_state
        yield GaugeMetricFamily(
            "mcptasks_queue_depth",
            "Tasks queued for a worker",
            value=counts.get(TaskState.QUEUED.value, 0),
        )
        yield GaugeMetricFamily(
            "mcptasks_reconciliation_backlog",
            "Effects whose outcome is unknown",
            value=Effect.objects.filter(state=EffectState.UNKNOWN).count(),
        )
        yield from _operations()
        from mcptasks.outbox import stats as outbox_stats

        yield from outbox_stats.gauges()
        loop_tasks = _event_loop_tasks()
        if loop_tasks is not None:
            yield GaugeMetricFamily(
                "mcptasks_event_loop_tasks",
                "asyncio tasks on this process's server loop",
                value=loop_tasks,
            )


def _operations() -> Iterator[GaugeMetricFamily]:
    """The operations page's figures (mcptasks/operations.py), for every tenant."""
    from mcptasks import operations

    ops = operations.snapshot()
    for name, rows in ops.count_tables:
        family = GaugeMetricFamily(
            f"mcptasks_tasks_by_{name}",
            f"Queued and running tasks by {name}",
            labels=[name, "state"],
        )
        for row in rows:
            family.add_metric([row["name"], "queued"], row["queued"])
            family.add_metric([row["name"], "running"], row["running"])
        yield family
    yield GaugeMetricFamily(
        "mcptasks_oldest_queued_seconds",
        "How long the oldest queued task has waited (0: none queued)",
        value=ops.oldest_queued["age_s"] if ops.oldest_queued else 0.0,
    )
    ended = GaugeMetricFamily(
        "mcptasks_tasks_ended_last_hour", "Tasks that ended in the last hour", labels=["outcome"]
    )
    ended.add_metric(["completed"], ops.completed_last_hour)
    ended.add_metric(["failed"], ops.failed_last_hour)
    yield ended
    yield GaugeMetricFamily(
        "mcptasks_leases_near_expiry",
        "Running tasks whose lease runs out within a third of MCPTASKS_LEASE_S",
        value=ops.leases_near_expiry_count,
    )
    workers = GaugeMetricFamily(
        "mcptasks_worker_heartbeat_age_seconds",
        "Seconds since each worker's last heartbeat",
        labels=["worker"],
    )
    now = timezone.now()
    for worker in ops.workers:
        workers.add_metric([worker.name], (now - worker.seen_at).total_seconds())
    yield workers
    yield GaugeMetricFamily(
        "mcptasks_workers_alive",
        "Workers with a recent heartbeat",
        value=sum(w.alive for w in ops.workers),
    )


def _event_loop_tasks() -> int | None:
    """Tasks alive on the server loop of this process (a leak check for streams)."""
    import asyncio

    from mcptasks import events

    loop = events._server_loop
    if loop is None or loop.is_closed():
        return None
    for _ in range(5):
        try:
            return len(asyncio.all_tasks(loop))
        except RuntimeError:  # the set changed while we counted; read again
            continue
    return None


def render() -> tuple[bytes, str]:
    """The exposition for /metrics."""
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY

    registry: Any
    if settings.PROMETHEUS_MULTIPROC_DIR:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = CollectorRegistry()
        for collector in list(REGISTRY._collector_to_names):
            registry.register(collector)
    registry.register(DatabaseCollector())
    return generate_latest(registry), CONTENT_TYPE_LATEST
