"""The Celery app. In production it only delivers and wakes; the task row is the record."""

from __future__ import annotations

import logging
import logging.config
import os
from typing import Any

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcptasks.settings")

app = Celery("mcptasks")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["mcptasks"], related_name="jobs")


@signals.setup_logging.connect
def structured_logging(loglevel: Any = None, **kwargs: Any) -> None:
    """Workers and beat log through the web's pipeline (``settings.LOGGING``: structlog and the
    redactor) instead of Celery's own handlers, task tracebacks included; ``-l`` sets the level.

    Connecting this signal stops Celery from configuring logging (and from redirecting
    stdout/stderr), so both are done here: prints go to ``celery.redirected``, redacted too.
    """
    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)
    if loglevel:
        logging.getLogger().setLevel(loglevel)
    if app.conf.worker_redirect_stdouts:
        app.log.redirect_stdouts(app.conf.worker_redirect_stdouts_level)


@signals.worker_init.connect
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


@signals.worker_init.connect
def start_tracing(**_: Any) -> None:
    """One trace per task (mcptasks/tracing.py): on when OTLP export is configured. Set up in
    the worker before it forks its pool; the SDK restarts its export thread in each child."""
    from mcptasks import tracing

    tracing.configure(role="worker", django=False)


@signals.worker_process_shutdown.connect
def flush_traces(**_: Any) -> None:
    """A pool child that exits hands its last spans to the exporter first."""
    from mcptasks import tracing

    tracing.flush()
