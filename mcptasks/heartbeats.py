"""Heartbeat rows (models.Heartbeat): each worker's, written by its keeper (keeper.py), and the
``sweep`` row, written by every run of the sweeps (sweeps.py). The operations page reads them."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from mcptasks.models import Heartbeat

SWEEP = "sweep"


def beat(name: str, **data: Any) -> None:
    """Record that ``name`` is alive now, with ``data``."""
    Heartbeat.objects.update_or_create(
        name=name, defaults={"seen_at": timezone.now(), "data": data}
    )
