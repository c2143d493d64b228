"""What a destination may subscribe to, and which destinations of a tenant want an event.

Reading the subscriptions of a tenant is cached per process for
``MCPTASKS_OUTBOX_SUBSCRIPTION_CACHE_S`` (the process that changes a destination forgets at
once), so a tenant without destinations costs a dictionary lookup per task change, not a query.
The cache answers only *whether* anyone may want an event: the destinations themselves are
read in the writing transaction, so a destination deleted meanwhile is never written to.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from django.conf import settings

# Task events: what a task's transitions emit (mcptasks.outbox.writer maps audit actions).
TASK_EVENTS: dict[str, str] = {
    "task.created": "A task was created",
    "task.status_changed": "A task moved to another state (started, waiting, resumed…)",
    "task.input_requested": "A task asks for input",
    "approval.requested": "An approval gate opened: its eligible reviewers may decide",
    "approval.decided": "A reviewer approved or rejected an approval gate",
    "task.completed": "A task completed (a rejected approval included)",
    "task.failed": "A task failed",
    "task.cancelled": "A task was cancelled",
}
AUDIT = "audit"  # every event of the tenant's audit chain, in chain order
ALL_EVENTS: tuple[str, ...] = (*TASK_EVENTS, AUDIT)


@dataclass(frozen=True)
class TenantSubscriptions:
    """The event types some enabled destination of a tenant subscribes to."""

    types: frozenset[str]

    def wants(self, event_type: str) -> bool:
        return event_type in self.types


_NONE = TenantSubscriptions(frozenset())
_cache: dict[int, tuple[float, TenantSubscriptions]] = {}
_lock = threading.Lock()


def for_tenant(tenant_id: int) -> TenantSubscriptions:
    """The tenant's subscriptions, read at most once per cache period in this process."""
    now = time.monotonic()
    ttl = settings.MCPTASKS_OUTBOX_SUBSCRIPTION_CACHE_S
    cached = _cache.get(tenant_id)
    if cached is not None and now - cached[0] < ttl:
        return cached[1]
    from mcptasks.outbox.models import Destination

    types: set[str] = set()
    for events in Destination.objects.filter(tenant_id=tenant_id, enabled=True).values_list(
        "events", flat=True
    ):
        types.update(e for e in events or () if isinstance(e, str))
    found = TenantSubscriptions(frozenset(types)) if types else _NONE
    if ttl > 0:
        with _lock:
            _cache[tenant_id] = (now, found)
    return found


def forget(tenant_id: int | None = None) -> None:
    """Drop what was read (of one tenant, or all): a destination changed in this process."""
    with _lock:
        if tenant_id is None:
            _cache.clear()
        else:
            _cache.pop(tenant_id, None)
