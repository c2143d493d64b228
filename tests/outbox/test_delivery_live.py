"""Delivery by real Celery workers on PostgreSQL + Redis (issue 24 point 3, issue 21 point 5):
tasks run and their events are sent by worker processes; a receiver really stopped for 60 s
gets every event once it is back; a worker SIGKILLed in the middle of a send loses nothing
(its claim's lease lapses and the sweep of another worker sends it again, same event id)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from audit.record import Actor
from mcptasks import lifecycle
from mcptasks.models import Delivery, DeliveryState, Task
from mcptasks.outbox import destinations, subscriptions
from mcptasks.sinks.webhook import verify
from tests.effects import conftest as effect_fixtures
from tests.faults import harness
from tests.outbox.receiver import Receiver

pytestmark = [
    pytest.mark.live,
    pytest.mark.pg,
    pytest.mark.redis,
    pytest.mark.django_db(transaction=True),
]
fault_settings = effect_fixtures.fault_settings
workdir = effect_fixtures.workdir
fake_cloud_file = effect_fixtures.fake_cloud_file
effects_broker = effect_fixtures.effects_broker
OUTBOX_ENV = {
    "MCPTASKS_OUTBOX_BACKOFF_BASE_S": "0.5",
    "MCPTASKS_OUTBOX_BACKOFF_MAX_S": "4",
    "MCPTASKS_OUTBOX_LEASE_S": "3",
    "MCPTASKS_OUTBOX_SEND_TIMEOUT_S": "30",
    "MCPTASKS_OUTBOX_SUBSCRIPTION_CACHE_S": "0.5",
}


@pytest.fixture
def cluster(
    transactional_db: None,
    fault_settings: Any,
    workdir: Path,
    fake_cloud_file: Path,
    effects_broker: tuple[str, str],
) -> Iterator[harness.Cluster]:
    from django.conf import settings
    from django.db import connection

    broker, channel = effects_broker
    cluster = harness.Cluster(
        database_url=harness.database_url(connection.settings_dict),
        broker_url=broker,
        channel_url=channel,
        workdir=workdir,
        tool_packs=list(settings.MCPTASKS_TOOL_PACKS),
        extra_env={
            "MCPTASKS_FAKE_CLOUD": str(fake_cloud_file),
            "MCPTASKS_LIMITS_REDIS_URL": channel,
            **OUTBOX_ENV,
        },
    )
    yield cluster
    cluster.stop_all()


def create_tasks(cast: dict[str, Any], count: int) -> list[str]:
    alice = cast["alice"]
    ids = []
    for n in range(count):
        task, _ = lifecycle.task_create(
            spec=lifecycle.NewTask(
                tenant_id=alice["tenant"].pk,
                principal_id=alice["user"].pk,
                tool_name="echo_task",
                arguments={"text": f"run {n}"},
                policy_revision="test",
                ttl_ms=600_000,
            ),
            actor=Actor.for_user(alice["user"], kind="principal"),
        )
        ids.append(task.pk)
    return ids


def hook(cast: dict[str, Any], url: str, secret: str) -> Any:
    subscriptions.forget()
    amy = cast["amy"]["user"]
    return destinations.create(
        tenant=cast["amy"]["tenant"],
        actor=Actor.for_user(amy),
        created_by=amy,
        name="live hooks",
        kind="webhook",
        config={"url": url},
        secret=secret,
        events=["task.created", "task.status_changed", "task.completed"],
    )


def by_task(receiver: Receiver, secret: str) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for request in receiver.ok():
        body = verify(secret, request.headers, request.body)
        found.setdefault(body["data"]["task"]["taskId"], []).append(body)
    return found


EXPECTED = ["task.created", "task.status_changed", "task.completed"]


def test_a_receiver_down_for_60_s_gets_every_event_once_in_order_when_back(cluster, cast, secret):
    receiver = Receiver()  # not started: down from the first event on
    hook(cast, receiver.url, secret)
    cluster.start_workers("w1", "w2")
    down_since = time.monotonic()
    task_ids = create_tasks(cast, 5)
    harness.wait_for(
        lambda: Task.objects.filter(pk__in=task_ids, state="completed").count() == 5,
        60,
        "the tasks to complete",
    )
    harness.wait_for(
        lambda: Delivery.objects.filter(attempts__gte=2).exists(), 30, "failed attempts"
    )
    assert not Delivery.objects.filter(state=DeliveryState.DELIVERED).exists()
    time.sleep(max(0.0, 60 - (time.monotonic() - down_since)))
    receiver.start()
    try:
        harness.wait_for(
            lambda: Delivery.objects.filter(state=DeliveryState.DELIVERED).count() == 15,
            60,
            "every delivery once the receiver is back",
        )
        events = by_task(receiver, secret)
        assert sorted(events) == sorted(task_ids)
        for task_id in task_ids:
            assert [b["type"] for b in events[task_id]] == EXPECTED, task_id
        ids = [b["id"] for bodies in events.values() for b in bodies]
        assert len(ids) == len(set(ids)) == 15  # once per event id
        assert not Delivery.objects.filter(state=DeliveryState.DEAD).exists()
    finally:
        receiver.stop()


def test_a_worker_killed_mid_delivery_loses_nothing(cluster, cast, secret):
    receiver = Receiver(delay_s=20).start()  # holds the first send in flight
    try:
        hook(cast, receiver.url, secret)
        first = cluster.start_worker("w1")
        [task_id] = create_tasks(cast, 1)
        harness.wait_for(lambda: receiver.arrived >= 1, 60, "a send in flight")
        in_flight = Delivery.objects.get(state=DeliveryState.DELIVERING)
        first.stop()  # SIGKILL the worker and its pool in the middle of the send
        receiver.delay_s = 0
        cluster.start_worker("w2")
        harness.wait_for(
            lambda: Task.objects.filter(pk=task_id, state="completed").exists(),
            90,
            "the task to complete on the second worker",
        )
        harness.wait_for(
            lambda: Delivery.objects.filter(state=DeliveryState.DELIVERED).count() == 3,
            60,
            "every delivery, the interrupted one included",
        )
        in_flight.refresh_from_db()
        assert in_flight.attempts >= 2  # claimed again after the lease lapsed
        events = by_task(receiver, secret)[task_id]
        ids = [b["id"] for b in events]
        assert in_flight.event_id in ids  # at least once, with its stable id
        unique = list(dict.fromkeys(b["type"] for b in events))
        assert unique == EXPECTED
    finally:
        receiver.stop()
