"""Side effects that must only happen after commit: job delivery and live broadcast.

Pass ids and small dicts, never model instances (STYLE rule 6).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from collections.abc import Callable
from datetime import datetime
from typing import Any

import redis
from channels.layers import InMemoryChannelLayer, get_channel_layer
from channels_redis.core import RedisChannelLayer
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


def task_group_name(task_id: str) -> str:
    """The channel-layer group of a task's changes. A group name allows letters, digits,
    ``-``, ``_`` and ``.``: a task id's ``~`` (mcptasks/task_ids.py) is written as ``.``,
    which no task id holds."""
    return "task." + task_id.replace("~", ".")


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

    groups = [task_group_name(task_id)] if task_group else []
    groups.append(f"tenant.{tenant_id}")
    if isinstance(layer, RedisChannelLayer):
        try:
            groups = _listened(layer, groups)
        except Exception:
            log.warning("broadcast failed", exc_info=True, extra={"task_id": task_id})
            return
        if not groups:
            return  # nobody listens: group_send would find no member and send nothing

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


def _listened(layer: RedisChannelLayer, groups: list[str]) -> list[str]:
    """Those of ``groups`` with a member ``group_send`` would send to (one joined within the
    layer's group expiry, as it counts them): a ZCOUNT per group (pipelined per Redis host),
    read from this thread, so a change nobody watches (a creation, mostly) costs no hand-off to the sender loop
    and none of group_send's commands. Every group when the layer's hosts are not plain
    addresses (Sentinel): group_send decides then."""
    clients = _group_clients(layer)
    if clients is None:
        return groups
    since = f"({int(time.time()) - layer.group_expiry}"  # group_send drops the members up to it
    by_host: dict[int, list[str]] = {}
    for group in groups:
        by_host.setdefault(layer.consistent_hash(group), []).append(group)
    listened = []
    for index, members in by_host.items():
        if len(members) == 1:  # a creation's one group: a command costs less than a pipeline
            counts = [clients[index].zcount(layer._group_key(members[0]), since, "+inf")]
        else:
            pipe = clients[index].pipeline(transaction=False)
            for group in members:
                pipe.zcount(layer._group_key(group), since, "+inf")
            counts = pipe.execute()
        listened += [g for g, n in zip(members, counts, strict=True) if n]
    return listened


_clients: weakref.WeakKeyDictionary[RedisChannelLayer, list[Any] | None] = (
    weakref.WeakKeyDictionary()
)
_clients_lock = threading.Lock()


def _group_clients(layer: RedisChannelLayer) -> list[Any] | None:
    """A synchronous redis-py client per host of ``layer`` (kept with the layer), or None if a
    host is not given by address."""
    with _clients_lock:
        if layer not in _clients:
            hosts = layer.hosts
            _clients[layer] = (
                [
                    redis.Redis.from_url(
                        host["address"], **{k: v for k, v in host.items() if k != "address"}
                    )
                    for host in hosts
                ]
                if all("address" in host for host in hosts)
                else None
            )
        return _clients[layer]


def broadcast_on_commit(
    *, task_id: str, tenant_id: int, version: int, task_group: bool = True
) -> None:
    """Announce ``(task id, version)`` to groups ``task.<id>`` and ``tenant.<id>`` after commit
    (``task_group`` as for :func:`broadcast`)."""
    transaction.on_commit(lambda: broadcast(task_id, tenant_id, version, task_group=task_group))
