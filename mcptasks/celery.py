"""The Celery app. In production it only delivers and wakes; the task row is the record."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcptasks.settings")

app = Celery("mcptasks")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["mcptasks"], related_name="jobs")


@worker_init.connect
def load_tool_packs(**_: Any) -> None:
    """Fail fast: a worker whose tool packs do not load would fail every job it takes; it
    stops at start-up with the error instead (SystemExit: Celery logs, then swallows, any
    Exception a signal handler raises)."""
    import logging

    import django

    django.setup()
    from mcptasks.tools.registry import ToolPackError, registry

    try:
        registry.ensure_loaded()
    except ToolPackError as exc:
        logging.getLogger("mcptasks.celery").critical("%s; the worker stops", exc)
        raise SystemExit(f"mcptasks worker: {exc}") from exc
