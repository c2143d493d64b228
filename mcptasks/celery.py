"""The Celery app. In production it only delivers and wakes; the task row is the record."""

from __future__ import annotations

import logging
import logging.config
import os
from typing import Any

from celery import Celery, signals
from celery.fixups import django as django_fixups

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcptasks.settings")


class WorkerDatabaseFixup(django_fixups.DjangoWorkerFixup):
    """Celery's Django fix-up of a worker, except at a task's start and end: there the process's
    database connections are kept as Django keeps them between requests
    (``close_old_connections``: closed only when broken, left in a transaction or past
    ``CONN_MAX_AGE``; a connection of the pool goes back to it), and so is the pool.

    Celery's own closes every connection before and after each task and, in a prefork child
    with Django's pool, the pool as well (celery#10554): each task then opened a new pool, its
    threads and a new PostgreSQL session — most of a no-op task's CPU in the worker (issue 23).
    A pool inherited from the parent is still closed in each new child (``worker_process_init``,
    unchanged), and so are the connections before beat's embedded start."""

    def on_task_prerun(self, sender: Any, **kwargs: Any) -> None:
        if not getattr(sender.request, "is_eager", False):
            close_old_connections()

    def on_task_postrun(self, sender: Any, **kwargs: Any) -> None:
        if not getattr(sender.request, "is_eager", False):
            close_old_connections()
            self.close_cache()


class DjangoFixup(django_fixups.DjangoFixup):
    """Celery's Django fix-up, its worker part :class:`WorkerDatabaseFixup`."""

    _worker_fixup: django_fixups.DjangoWorkerFixup | None

    @property
    def worker_fixup(self) -> django_fixups.DjangoWorkerFixup:
        if self._worker_fixup is None:
            self._worker_fixup = WorkerDatabaseFixup(self.app)
        return self._worker_fixup

    @worker_fixup.setter
    def worker_fixup(self, value: django_fixups.DjangoWorkerFixup) -> None:
        self._worker_fixup = value


def django_fixup(celery_app: Celery) -> DjangoFixup | None:
    """What ``celery.fixups.django:fixup`` does, with :class:`DjangoFixup`."""
    if not os.environ.get("DJANGO_SETTINGS_MODULE"):
        return None
    return DjangoFixup(celery_app).install()


def close_old_connections() -> None:
    from django.db import close_old_connections as close

    close()


app = Celery("mcptasks", fixups=["mcptasks.celery:django_fixup"])
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
