"""The outbox on /metrics: deliveries by kind and state, lag, failures and dead letters per
destination kind, and the audit streams' lag in events."""

from __future__ import annotations

import pytest
from django.utils import timezone

from mcptasks.models import Delivery, DeliveryState
from mcptasks.outbox import delivery

pytestmark = pytest.mark.django_db(transaction=True)


def test_metrics_show_backlog_lag_failures_and_dead_letters_per_kind(
    client, webhook, make_task, run_jobs, receiver
):
    webhook(events=["task.created"])
    webhook(events=["audit"], name="siem")
    receiver.status = 500
    make_task()
    run_jobs()
    receiver.status = 401
    make_task(owner="adam")
    run_jobs()
    body = client.get("/metrics").content.decode()
    assert 'mcptasks_outbox_deliveries{kind="webhook",state="pending"}' in body
    assert 'mcptasks_outbox_deliveries{kind="webhook",state="dead"}' in body
    assert 'mcptasks_outbox_lag_seconds{kind="webhook"}' in body
    assert 'mcptasks_outbox_failures_total{kind="webhook"}' in body
    assert 'mcptasks_outbox_dead_letters_total{kind="webhook"}' in body
    assert 'mcptasks_outbox_audit_lag_events{kind="webhook"}' in body
    receiver.status = 204
    # Due now, as if the backoff had passed.
    Delivery.objects.filter(state=DeliveryState.PENDING).update(next_attempt_at=timezone.now())
    delivery.sweep(grace_s=0)
    run_jobs()
    body = client.get("/metrics").content.decode()
    assert 'mcptasks_outbox_delivered_total{kind="webhook"}' in body
