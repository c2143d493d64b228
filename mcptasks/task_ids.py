"""Task ids: what they look like and how the database compares them.

A task id is ``~`` + the creation day (``YYYYMMDD``, UTC) + 192 random url-safe bits from
:mod:`secrets` (DESIGN §3: ≥128 bits). The day prefix is what partitions the task table on
PostgreSQL (migration ``0016_partition_tasks``, :mod:`mcptasks.task_partitions`): each day's
tasks live in a partition of their own, and the TTL purge drops a day whose every task is due
as one table. The ``~`` sorts after every character of the ids made before partitioning
(``secrets.token_urlsafe`` alone: ``A–Z a–z 0–9 - _``), which all live in the partition below
``~`` and keep working. The day is no secret: a task's ``createdAt`` says as much, and an id
is never an authority.

Ids are compared byte-wise (``COLLATE "C"``) on PostgreSQL, so that range partitioning and a
lookup agree whatever the database's locale; every column that holds a task id uses
:class:`TaskIdField` so that comparing two of them never mixes collations.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any

from django.db import models
from django.db.models.functions import Substr
from django.utils import timezone

PREFIX = "~"


def day_prefix(when: datetime) -> str:
    """The id prefix of tasks created on ``when``'s day (UTC): ``~YYYYMMDD``."""
    return f"{PREFIX}{when.astimezone(UTC):%Y%m%d}"


def new_task_id(now: datetime | None = None) -> str:
    """A new task id: the creation day's prefix and 192 random bits (url-safe)."""
    return day_prefix(now or timezone.now()) + secrets.token_urlsafe(24)


def distinctive(task_id: str) -> str:
    """The part of a task id that tells it from the others of its day: the id without its day
    prefix (for short displays; a full id is never shortened where it is an address)."""
    if task_id.startswith(PREFIX) and task_id[1:9].isdigit():
        return task_id[9:]
    return task_id


def id_tail() -> Substr:
    """A task id after its day prefix, as SQL (the index ``task_id_tail`` and the search)."""
    return Substr("id", len(PREFIX) + 9)


class TaskIdField(models.CharField):
    """A column holding a task id: ``COLLATE "C"`` on PostgreSQL, the default elsewhere."""

    def db_parameters(self, connection: Any) -> dict[str, Any]:
        parameters = super().db_parameters(connection)
        if connection.vendor == "postgresql":
            parameters["collation"] = "C"
        return parameters
