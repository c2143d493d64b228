"""The durable outbox: every message leaving the system (task-event webhooks, reviewer
notifications, audit streams to SIEMs) is a row written in the transaction of its cause and
delivered by Celery jobs, at least once, with a stable event id (docs/webhooks.md,
docs/audit.md "Streaming to a SIEM").

- :mod:`.models` — destinations (per tenant, by its admins) and deliveries.
- :mod:`.writer` — rows written in the writing transaction; the audit stream's cursor.
- :mod:`.delivery` — claim, send, retry with backoff, dead letters, redeliver, the sweep.
- :mod:`.destinations` — creating, changing and deleting destinations, audited.
- :mod:`.crypto` — destination secrets encrypted at rest.
"""

from __future__ import annotations

from typing import Any


def task_event(task: Any, action: str, data: dict[str, Any] | None = None, *, by: str = "") -> None:
    """lifecycle's hook: the audited ``action`` on ``task`` happened in this transaction;
    ``by`` names who did it (the audit actor's display name)."""
    from mcptasks.outbox import writer

    writer.task_event(task, action, data, by=by)


def quiet(tenant_id: int) -> bool:
    """Does the tenant subscribe to nothing, so that :func:`task_event` writes no row (the
    cached subscriptions: a dictionary lookup)? A writer may then skip calling it."""
    from mcptasks.outbox import subscriptions

    return not subscriptions.for_tenant(tenant_id).types
