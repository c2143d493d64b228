"""Celery job messages pushed straight to the Redis broker: one LPUSH per job (issue 23).

``Task.apply_async`` builds the same message through ``send_task``, the router, a pooled producer,
``Connection.ensure``, the declare cache and a new redis-py client per put: about a third of a
task creation's CPU. :func:`publish` builds it with Celery's and kombu's own message builders
(``create_task_message``, kombu's serializer, the Redis channel's ``prepare_message`` and body
encoding: the wire format of the installed versions, protocol 2) and pushes it with one redis-py
client kept per process, so workers read exactly what ``apply_async`` would have sent.

The plan for a job (its queue, time limits, the channel) is made once per process; a job this
module cannot send the same way as Celery would — a custom route, a priority, an ETA, a non-JSON
serializer, publish signals connected (tracing), eager mode, a broker other than Redis — answers
None and the caller uses ``apply_async``.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from celery import Celery, signals
from celery.app.task import Task as CeleryTask
from celery.utils.nodenames import anon_nodename
from celery.utils.saferepr import saferepr
from kombu.serialization import dumps
from kombu.transport.redis import Channel as RedisChannel
from kombu.utils.json import dumps as json_dumps
from kombu.utils.uuid import uuid
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

# Signals whose receivers see (or change) each published message, e.g. the OpenTelemetry Celery
# instrumentation's trace headers: with any connected, publishing stays Celery's.
PUBLISH_SIGNALS = (signals.before_task_publish, signals.after_task_publish, signals.task_sent)
# Task attributes apply_async would turn into publish options of its own (none are set on the
# project's jobs): a task with one goes through apply_async.
TASK_OPTIONS = (
    "queue",
    "routing_key",
    "exchange",
    "priority",
    "expires",
    "compression",
    "delivery_mode",
)
# kwargs whose repr() is what Celery's saferepr writes in the kwargsrepr header.
SHORT_TEXT = 200


@dataclass(frozen=True)
class Plan:
    """How one job's messages are sent from this process."""

    task: CeleryTask
    queue: str  # the routing key of Celery's anonymous-exchange publish: the queue's name
    key: str  # the Redis list the worker pops (the queue's, priority 0)
    delivery_mode: int
    time_limits: tuple[int | None, int | None]
    ignore_result: bool
    channel: RedisChannel
    client: Any  # the channel's redis-py client class (key prefix included) on its pool
    retry: tuple[int, float, float, float]  # retries, first wait, its step, the longest wait
    check_arguments: Any  # the task's signature check (None: the task does no typing check)


class Publisher:
    """Sends jobs of ``app`` as Celery would, one LPUSH each; plans are kept per process."""

    def __init__(self, app: Celery) -> None:
        self.app = app
        self._plans: dict[str, Plan | None] = {}
        self._made_for: tuple[int, str] = (0, "")  # the process and the broker of the plans
        self._connection: Any = None
        self._lock = threading.Lock()

    def publish(self, name: str, kwargs: dict[str, Any]) -> str | None:
        """Send Celery task ``name`` with ``kwargs``; return its Celery task id, or None if it
        must go through ``apply_async`` (nothing was sent then). Broker errors are raised."""
        if any(signal.receivers for signal in PUBLISH_SIGNALS):
            return None
        plan = self._plan(name)
        if plan is None:
            return None
        if plan.check_arguments is not None:
            plan.check_arguments(**kwargs)  # the argument check apply_async makes (task.typing)
        task_id = uuid()
        root_id, parent_id = task_id, None
        parent = self.app.current_worker_task
        if parent is not None:  # as send_task: a job sent from a job belongs to its tree
            root_id = parent.request.root_id or parent.request.id
            parent_id = parent.request.id
        message = self.app.amqp.create_task_message(
            task_id,
            plan.task.name,
            (),
            kwargs,
            reply_to=self.app.thread_oid,
            time_limit=plan.time_limits[0],
            soft_time_limit=plan.time_limits[1],
            root_id=root_id,
            parent_id=parent_id,
            origin=_origin(),
            ignore_result=plan.ignore_result,
            argsrepr="()",
            kwargsrepr=_kwargs_repr(kwargs, self.app),
        )
        content_type, content_encoding, body = dumps(message.body, serializer="json")
        channel = plan.channel
        envelope = channel.prepare_message(
            body,
            0,
            content_type,
            content_encoding,
            message.headers,
            {**message.properties, "delivery_mode": plan.delivery_mode},
        )
        # What the channel's basic_publish adds before its put (kombu's virtual transport).
        envelope["body"], body_encoding = channel.encode_body(body, channel.body_encoding)
        envelope["properties"].update(
            body_encoding=body_encoding, delivery_tag=channel._next_delivery_tag()
        )
        envelope["properties"]["delivery_info"].update(exchange="", routing_key=plan.queue)
        self._push(plan, json_dumps(envelope))
        return task_id

    def _push(self, plan: Plan, payload: str) -> None:
        """LPUSH ``payload``, retried on connection errors as Celery's publish retry policy
        says (``task_publish_retry``, ``task_publish_retry_policy``): a pooled connection that
        a Redis restart closed fails once, then a new one is made."""
        retries, wait, step, longest = plan.retry
        for attempt in range(retries + 1):
            try:
                plan.client.lpush(plan.key, payload)
                return
            except (RedisConnectionError, RedisTimeoutError):
                if attempt == retries:
                    raise
            time.sleep(min(wait, longest))
            wait += step

    def _plan(self, name: str) -> Plan | None:
        # Plans of another process (inherited by a prefork pool child) or of another broker URL
        # (the app's configuration changed) are dropped.
        made_for = (os.getpid(), str(self.app.conf.broker_write_url or self.app.conf.broker_url))
        if made_for != self._made_for:
            with self._lock:
                self._plans, self._connection, self._made_for = {}, None, made_for
        try:
            return self._plans[name]
        except KeyError:
            pass
        with self._lock:
            if name not in self._plans:
                self._plans[name] = self._make_plan(name)
            return self._plans[name]

    def _make_plan(self, name: str) -> Plan | None:
        """The plan of task ``name``, or None where Celery's own publish would differ."""
        app, conf = self.app, self.app.conf
        task = app.tasks.get(name)
        if (
            task is None
            or conf.task_always_eager
            or conf.task_protocol != 2
            or conf.task_send_sent_event
            or conf.task_routes
            or conf.task_default_priority is not None
            or conf.task_inherit_parent_priority
            or conf.task_queue_max_priority is not None
            or (task.serializer or conf.task_serializer) != "json"
            or conf.task_compression
            # the execution options apply_async takes from the task (extract_exec_options)
            or any(getattr(task, option, None) is not None for option in TASK_OPTIONS)
            or type(task).apply_async is not CeleryTask.apply_async
            or type(task).shadow_name is not CeleryTask.shadow_name
        ):
            return None
        queue = app.amqp.default_queue
        if (
            queue.exchange.type != "direct"
            or queue.expires is not None
            or queue.message_ttl is not None
            or queue.max_priority is not None
            or queue.queue_arguments
        ):
            return None
        if self._connection is None:
            self._connection = app.connection_for_write(self._made_for[1])
        channel = self._connection.default_channel  # connects (a ping); broker errors raise
        if not isinstance(channel, RedisChannel):
            return None
        queue(channel).declare()  # what the producer's declare cache does once per process
        if queue.name in channel._expires:
            return None
        return Plan(
            task=task,
            queue=queue.name,
            key=channel._q_for_pri(queue.name, 0),
            delivery_mode=queue.exchange.delivery_mode or 2,
            time_limits=(task.time_limit, task.soft_time_limit),
            ignore_result=bool(task.ignore_result),
            channel=channel,
            client=channel._create_client(),
            retry=_retry_policy(app),
            check_arguments=getattr(task, "__header__", None) if task.typing else None,
        )


def _retry_policy(app: Celery) -> tuple[int, float, float, float]:
    """Celery's publish retry policy: retries, the first wait, its step and the longest wait."""
    policy = app.conf.task_publish_retry_policy or {}
    return (
        int(policy.get("max_retries") or 0) if app.conf.task_publish_retry else 0,
        float(policy.get("interval_start") or 0),
        float(policy.get("interval_step") or 0),
        float(policy.get("interval_max") or 0),
    )


_origins: dict[int, str] = {}


def _origin() -> str:
    """Celery's ``origin`` header of this process (its anonymous node name)."""
    pid = os.getpid()
    origin = _origins.get(pid)
    if origin is None:
        origin = _origins[pid] = anon_nodename()
    return origin


def _kwargs_repr(kwargs: dict[str, Any], app: Celery) -> str:
    """The ``kwargsrepr`` header: ``repr`` where it equals Celery's saferepr (short text
    values: ids), else saferepr itself."""
    if all(isinstance(v, str) and len(v) <= SHORT_TEXT for v in kwargs.values()):
        return repr(kwargs)
    return str(
        saferepr(kwargs, app.amqp.kwargsrepr_maxsize, maxlevels=app.conf.task_repr_maxlevels)
    )
