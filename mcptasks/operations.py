"""The figures of the operations page and of ``/metrics`` (issue 22), from the database.

Each figure is one grouped query on indexed columns (state, tenant, tool, lease expiry), so the
page stays cheap with many tasks; their states are written into the statements
(``plans.written``), so a connection's prepared statements keep plans that read only the rows in
those states. ``tenant_ids`` limits task figures to the tenants an operator
runs; workers are shown to every operator (they serve all tenants).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from mcptasks.models import Heartbeat, Task, TaskState, Tenant
from mcptasks.plans import generic_plans, written

S = TaskState
HOUR = timedelta(hours=1)


@dataclass
class Worker:
    name: str
    seen_at: datetime
    alive: bool
    concurrency: int


@dataclass
class Snapshot:
    workers: list[Worker]
    by_tenant: list[dict[str, Any]]
    by_tool: list[dict[str, Any]]
    running_by_owner: list[dict[str, Any]]
    oldest_queued: dict[str, Any] | None
    completed_last_hour: int
    failed_last_hour: int
    leases_near_expiry: list[dict[str, Any]] = field(default_factory=list)
    leases_near_expiry_count: int = 0

    @property
    def count_tables(self) -> list[tuple[str, list[dict[str, Any]]]]:
        return [("tenant", self.by_tenant), ("tool", self.by_tool)]

    @property
    def throughput_last_hour(self) -> int:
        return self.completed_last_hour + self.failed_last_hour

    @property
    def failure_rate(self) -> float:
        ended = self.throughput_last_hour
        return self.failed_last_hour / ended if ended else 0.0


def alive_after() -> datetime:
    """Heartbeats older than this mean a worker is gone (keeper.py beats once a sweep period)."""
    return timezone.now() - timedelta(seconds=max(5 * settings.MCPTASKS_SWEEP_INTERVAL_S, 10))


def workers() -> list[Worker]:
    cutoff = alive_after()
    return [
        Worker(
            name=beat.name.removeprefix("worker:"),
            seen_at=beat.seen_at,
            alive=beat.seen_at >= cutoff,
            concurrency=int((beat.data or {}).get("concurrency") or 0),
        )
        for beat in Heartbeat.objects.filter(name__startswith="worker:").order_by("name")
    ]


def _backlog(tasks: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The queued and running tasks counted by tenant and by tool, each ``[{"name", "queued",
    "running"}]`` in name order: one grouped pass over those rows (they are read from the
    heap, wherever they lie in the table; two passes cost twice that at 1,000,000 tasks)."""
    by_tenant: dict[str, dict[str, Any]] = {}
    by_tool: dict[str, dict[str, Any]] = {}
    rows = (
        tasks.filter(state__in=[written(S.QUEUED), written(S.RUNNING)])
        .values("tenant__slug", "tool_name", "state")
        .annotate(n=Count("pk"))
        .order_by()
    )
    for row in rows:
        for table, name in ((by_tenant, row["tenant__slug"]), (by_tool, row["tool_name"])):
            counts = table.setdefault(name, {"name": name, "queued": 0, "running": 0})
            counts[row["state"]] += row["n"]
    return (
        [by_tenant[name] for name in sorted(by_tenant)],
        [by_tool[name] for name in sorted(by_tool)],
    )


def snapshot(tenant_ids: list[int] | None = None) -> Snapshot:
    # On their generic plans (one transaction): PostgreSQL, unable to cost a bound timestamp,
    # otherwise plans the lease and last-hour queries afresh at each request, which grows with
    # the table (at 100,000 tasks 1 ms each, against 0.2–0.4 ms on the generic plan).
    with generic_plans():
        return _snapshot(tenant_ids)


def _snapshot(tenant_ids: list[int] | None) -> Snapshot:
    tasks = (
        Task.objects.all() if tenant_ids is None else Task.objects.filter(tenant_id__in=tenant_ids)
    )
    now = timezone.now()
    first: Any = (
        tasks.filter(state=written(S.QUEUED))
        .order_by("updated_at")
        .values("pk", "tenant__slug", "tool_name", "updated_at")
        .first()
    )
    oldest: dict[str, Any] | None = dict(first) if first is not None else None
    if oldest is not None:
        oldest["age_s"] = max((now - oldest["updated_at"]).total_seconds(), 0.0)
    # By tenant even for every tenant (/metrics): the (tenant, updated) index then reads only
    # the last hour's rows; with no tenant condition it walks the whole index.
    every_tenant = list(Tenant.objects.values_list("pk", flat=True)) if tenant_ids is None else None
    recent = tasks if every_tenant is None else tasks.filter(tenant_id__in=every_tenant)
    ended = recent.filter(
        state__in=[written(S.COMPLETED), written(S.FAILED)], updated_at__gte=now - HOUR
    ).aggregate(
        completed=Count("pk", filter=Q(state=written(S.COMPLETED))),
        failed=Count("pk", filter=Q(state=written(S.FAILED))),
    )
    soon = now + timedelta(seconds=settings.MCPTASKS_LEASE_S / 3)
    expiring = tasks.filter(state=written(S.RUNNING), lease_expires_at__lt=soon)
    near: list[dict[str, Any]] = [
        dict(row)
        for row in expiring.order_by("lease_expires_at").values(
            "pk", "tenant__slug", "tool_name", "lease_owner", "lease_expires_at"
        )[:50]
    ]
    for row in near:
        row["expires_in_s"] = (row["lease_expires_at"] - now).total_seconds()
    by_tenant, by_tool = _backlog(tasks)
    return Snapshot(
        workers=workers(),
        by_tenant=by_tenant,
        by_tool=by_tool,
        running_by_owner=[
            dict(row)
            for row in tasks.filter(state=written(S.RUNNING))
            .values("lease_owner")
            .annotate(running=Count("pk"))
            .order_by("lease_owner")
        ],
        oldest_queued=oldest,
        completed_last_hour=ended["completed"],
        failed_last_hour=ended["failed"],
        leases_near_expiry=near,
        leases_near_expiry_count=len(near) if len(near) < 50 else expiring.count(),
    )
