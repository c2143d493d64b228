"""Dashboard routes."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver

app_name = "dashboard"
urlpatterns: list[URLPattern | URLResolver] = []
