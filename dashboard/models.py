"""What the dashboard keeps per user: their preferences (the time zone pages write times in)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Preference(models.Model):
    """One user's dashboard preferences. ``time_zone`` is an IANA name ("Asia/Tokyo"); empty
    means the browser's zone (the ``mcptasks_tz`` cookie the page's script sets)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="dashboard_preference"
    )
    time_zone = models.CharField(max_length=64, blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.user_id}: {self.time_zone or 'browser'}"
