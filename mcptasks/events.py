"""Side effects that must only happen after commit: job delivery and live broadcast.

Pass ids and small dicts, never model instances (STYLE rule 6).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)


# Where jobs go: mcptasks.dispatch.deliver (the in-process worker or Celery), registered when the
# app is ready (mcptasks/apps.py). A seam, so that the writers of task state that schedule jobs
# (lifecycle, sweeps, fairshare, the outbox) never import the jobs, which import them.
JobDispatcher = Callable[[str, dict[str, Any], datetime | None], None]
_dispatcher: JobDispatcher | None = None


def register_dispatcher(dispatcher: JobDispatcher) -> None:
    """Set where :func:`dispatch_job` delivers jobs (once, at app ready; tests may swap it)."""
    global _dispatcher
    _dispatcher = dispatcher


def dispatch_job(job: str, kwargs: dict[str, Any], eta: datetime | None = None) -> None:
    """Deliver a job now, through the registered dispatcher."""
    if _dispatcher is None:
        raise RuntimeError("no job dispatcher registered: the mcptasks app is not ready")
    _dispatcher(job, kwargs, eta)


def enqueue_on_commit(job: str, eta: datetime | None = None, **kwargs: Any) -> None:
    """Schedule ``jobs.<job>(**kwargs)`` once the current transaction commits."""
    transaction.on_commit(lambda: dispatch_job(job, kwargs, eta=eta))


_server_loop: asyncio.AbstractEventLoop | None = None


def remember_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Record the server's event loop (the first one, while it runs): the in-memory channel
    layer lives there."""
    global _server_loop
    if _server_loop is None or _server_loop.is_closed() or not _server_loop.is_running():
        _server_loop = loop


_sender: asyncio.AbstractEventLoop | None = None
_sender_lock = threading.Lock()


def _sender_loop() -> asyncio.AbstractEventLoop:
    """A daemon thread's event loop for channel-layer sends from synchronous code."""
    global _sender
    with _sender_lock:
        if _sender is None or _sender.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(
                target=loop.run_forever, name="mcptasks-broadcast", daemon=True
            ).start()
            _sender = loop
    return _sender


def broadcast(task_id: str, tenant_id: int, version: int, *, task_group: bool = True) -> None:
    """Send ``(task id, version)`` to groups ``task.<id>`` and ``tenant.<id>`` now; with
    ``task_group`` False to ``tenant.<id>`` only (a task just created: nobody can have
    subscribed to its own group before its id was answered)."""
    layer = get_channel_layer()
    if layer is None:
        return
    message = {
        "type": "task.changed",
        "task_id": task_id,
        "tenant_id": tenant_id,
        "version": version,
    }

    groups = [f"task.{task_id}"] if task_group else []
    groups.append(f"tenant.{tenant_id}")

    async def send_all() -> None:
        for group in groups:
            await layer.group_send(group, message)

    try:
        if isinstance(layer, InMemoryChannelLayer):
            # The in-memory layer is not thread-safe: run it on the server's loop.
            loop = _server_loop
            if loop is None or loop.is_closed():
                return  # no stream can be listening in this process
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                loop.create_task(send_all())
            else:
                asyncio.run_coroutine_threadsafe(send_all(), loop)
        else:
            # One long-lived loop per process sends for every thread: no loop and no Redis
            # connection set up per broadcast.
            asyncio.run_coroutine_threadsafe(send_all(), _sender_loop())
    except Exception:
        # At most once by design: streams catch up from the database.
        log.warning("broadcast failed", exc_info=True, extra={"task_id": task_id})


def broadcast_on_commit(
    *, task_id: str, tenant_id: int, version: int, task_group: bool = True
) -> None:
    """Announce ``(task id, version)`` to groups ``task.<id>`` and ``tenant.<id>`` after commit
    (``task_group`` as for :func:`broadcast`)."""
    transaction.on_commit(lambda: broadcast(task_id, tenant_id, version, task_group=task_group))
