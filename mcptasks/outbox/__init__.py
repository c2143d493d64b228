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


def task_event(task: Any, action: str, data: dict[str, Any] | None = None) -> None:
    """lifecycle's hook: the audited ``action`` on ``task`` happened in this transaction."""
    from mcptasks.outbox import writer

    writer.task_event(task, action, data)
