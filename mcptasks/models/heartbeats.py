"""Signs of life of processes and periodic jobs (workers, the sweep), kept in the database."""

from __future__ import annotations

from django.db import models


class Heartbeat(models.Model):
    """The last sign of life of a process or a periodic job, kept in the database (the truth
    when the broker is down): ``worker:<hostname>`` rows of Celery workers, ``sweep`` of the
    last sweep run (mcptasks/keeper.py)."""

    name = models.CharField(max_length=200, primary_key=True)
    seen_at = models.DateTimeField()
    data = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return self.name
