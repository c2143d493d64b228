"""Task events to a signed webhook on the embedded default (issue 24 points 1–3): rows written
in the transaction of the change, delivered after commit, once per event id, in order per task,
signed in the Standard Webhooks style; retries, dead letters and redelivery."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from django.db import transaction

from audit.models import AuditEvent
from audit.record import Actor
from mcptasks.models import Delivery, DeliveryState
from mcptasks.outbox import delivery, subscriptions
from mcptasks.runner import run_task
from mcptasks.sinks.webhook import WebhookVerificationError, new_secret, verify

pytestmark = pytest.mark.django_db(transaction=True)


def bodies(receiver: Any, secret: str) -> list[dict[str, Any]]:
    """Every received webhook, verified with ``secret``."""
    return [verify(secret, r.headers, r.body) for r in receiver.ok()]


def test_receiver_gets_every_task_event_once_in_order_with_a_valid_signature(
    webhook, make_task, run_jobs, receiver, secret
):
    webhook()
    tasks = [make_task(arguments={"text": f"run {n}"}) for n in range(3)]
    run_jobs()
    for task in tasks:
        run_task(task.pk)
    run_jobs()
    received = bodies(receiver, secret)
    ids = [body["id"] for body in received]
    assert len(ids) == len(set(ids)), "an event id was delivered twice"
    for task in tasks:
        mine = [b for b in received if b["data"]["task"]["taskId"] == task.pk]
        assert [b["type"] for b in mine] == [
            "task.created",
            "task.status_changed",
            "task.completed",
        ]
        assert [b["data"]["version"] for b in mine] == sorted(b["data"]["version"] for b in mine)
        assert mine[-1]["data"]["task"]["status"] == "completed"
        assert mine[0]["tenant"] == "acme"
        assert mine[0]["data"]["dashboard_url"].endswith(f"/tasks/{task.pk}/")
    for request in receiver.ok():
        assert request.headers["webhook-signature"].startswith("v1,")
        assert request.headers["webhook-id"] == json.loads(request.body)["id"]
    assert set(Delivery.objects.values_list("state", flat=True)) == {DeliveryState.DELIVERED}


def test_a_wrong_secret_fails_verify(webhook, make_task, run_jobs, receiver, secret):
    webhook(events=["task.created"])
    make_task()
    run_jobs()
    [request] = receiver.ok()
    with pytest.raises(WebhookVerificationError, match="no matching signature"):
        verify(new_secret(), request.headers, request.body)
    with pytest.raises(WebhookVerificationError):
        verify(secret, request.headers, request.body + b" ")  # an altered body
    with pytest.raises(WebhookVerificationError, match="too far"):
        verify(secret, request.headers, request.body, now=time.time() + 3600)  # a replay
    assert verify(secret, request.headers, request.body)["type"] == "task.created"


def test_nothing_is_written_or_sent_for_a_change_that_rolls_back(
    webhook, make_task, run_jobs, receiver
):
    webhook(events=["task.created"])

    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic():
        make_task()
        assert Delivery.objects.count() == 1  # in the same transaction as the task
        raise Rollback
    run_jobs()
    assert Delivery.objects.count() == 0
    assert receiver.ok() == []


def test_a_tenant_without_subscriptions_writes_nothing_and_reads_them_once(
    cast, make_task, run_jobs, django_assert_num_queries, settings
):
    settings.MCPTASKS_OUTBOX_SUBSCRIPTION_CACHE_S = 60
    make_task()  # reads (and caches) acme's subscriptions: none
    with django_assert_num_queries(0):
        assert subscriptions.for_tenant(cast["alice"]["tenant"].pk).types == frozenset()
    make_task()
    run_jobs()
    assert Delivery.objects.count() == 0


def test_only_the_subscribed_event_types_are_sent(webhook, make_task, run_jobs, receiver, secret):
    webhook(events=["task.completed", "task.failed"])
    done = make_task()
    failed = make_task(tool_name="crash_task")
    run_jobs()
    run_task(done.pk)
    run_task(failed.pk)
    run_jobs()
    types = sorted((b["data"]["task"]["taskId"], b["type"]) for b in bodies(receiver, secret))
    assert types == sorted([(done.pk, "task.completed"), (failed.pk, "task.failed")])
    failed_body = next(b for b in bodies(receiver, secret) if b["type"] == "task.failed")
    assert "widget cache overflow" not in json.dumps(failed_body)  # sanitized, as on the wire


def test_a_down_receiver_gets_every_event_once_it_is_back(
    webhook, make_task, run_jobs, receiver, secret, settings
):
    settings.MCPTASKS_OUTBOX_BACKOFF_BASE_S = 0.05
    settings.MCPTASKS_OUTBOX_BACKOFF_MAX_S = 0.2
    webhook()
    receiver.stop()
    task = make_task()
    run_jobs()
    run_task(task.pk)
    run_jobs()
    waiting = list(Delivery.objects.order_by("id"))
    assert waiting and all(d.state == DeliveryState.PENDING for d in waiting)
    assert waiting[0].attempts >= 1 and waiting[0].last_error == "could not connect to the receiver"
    assert all(d.attempts == 0 for d in waiting[1:]), "later events of the task waited in line"
    receiver.start()
    deadline = time.monotonic() + 10
    while Delivery.objects.exclude(state=DeliveryState.DELIVERED).exists():
        assert time.monotonic() < deadline, list(Delivery.objects.values("state", "attempts"))
        time.sleep(0.1)
        delivery.sweep(grace_s=0)
        run_jobs()
    types = [b["type"] for b in bodies(receiver, secret)]
    assert types == ["task.created", "task.status_changed", "task.completed"]


def test_a_delivery_failing_past_the_horizon_is_dead_and_redeliver_sends_it(
    webhook, make_task, run_jobs, receiver, secret, settings, cast
):
    settings.MCPTASKS_OUTBOX_BACKOFF_BASE_S = 0.05
    settings.MCPTASKS_OUTBOX_BACKOFF_MAX_S = 0.1
    settings.MCPTASKS_OUTBOX_DEAD_AFTER_S = 0.5
    webhook(events=["task.created"])
    receiver.status = 503
    make_task()
    deadline = time.monotonic() + 10
    while not Delivery.objects.filter(state=DeliveryState.DEAD).exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
        delivery.sweep(grace_s=0)
        run_jobs()
    dead = Delivery.objects.get()
    assert dead.attempts >= 2 and dead.last_error == "the receiver answered HTTP 503"
    receiver.status = 204
    receiver.requests.clear()
    amy = cast["amy"]["user"]
    delivery.redeliver(delivery=dead, user=amy, actor=Actor.for_user(amy))
    run_jobs()
    dead.refresh_from_db()
    assert dead.state == DeliveryState.DELIVERED and dead.redelivered_by == amy
    [body] = bodies(receiver, secret)
    assert body["id"] == dead.event_id  # the same event id: the receiver de-duplicates on it
    audit = AuditEvent.objects.get(action="destination.redelivered")
    assert audit.data["delivery_id"] == dead.pk


def test_a_final_refusal_is_dead_at_once(webhook, make_task, run_jobs, receiver):
    webhook(events=["task.created"])
    receiver.status = 410
    make_task()
    run_jobs()
    dead = Delivery.objects.get()
    assert dead.state == DeliveryState.DEAD and dead.attempts == 1
    assert dead.last_error == "the receiver answered HTTP 410"


def test_redeliver_refuses_a_delivery_that_is_not_dead(webhook, make_task, run_jobs, cast):
    webhook(events=["task.created"])
    make_task()
    run_jobs()
    row = Delivery.objects.get()
    amy = cast["amy"]["user"]
    with pytest.raises(delivery.NotDead):
        delivery.redeliver(delivery=row, user=amy, actor=Actor.for_user(amy))


def test_a_disabled_destination_gets_no_new_deliveries(webhook, make_task, run_jobs, cast):
    from mcptasks.outbox import destinations

    hook = webhook(events=["task.created"])
    destinations.update(destination=hook, actor=Actor.for_user(cast["amy"]["user"]), enabled=False)
    make_task()
    run_jobs()
    assert Delivery.objects.count() == 0


def test_a_task_the_owner_may_not_see_is_not_sent(webhook, make_task, run_jobs, cast, receiver):
    # alice (a plain member) owns the destination: she sees her own tasks, not adam's.
    webhook(events=["task.created"], owner=cast["alice"]["user"])
    mine = make_task(owner="alice")
    make_task(owner="adam")
    run_jobs()
    assert [d.task_id for d in Delivery.objects.all()] == [mine.pk]
