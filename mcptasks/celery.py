"""The Celery app. In production it only delivers and wakes; the task row is the record."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcptasks.settings")

app = Celery("mcptasks")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["mcptasks"], related_name="jobs")
