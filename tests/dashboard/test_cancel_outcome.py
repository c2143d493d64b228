"""The dashboard renders lifecycle's cancel outcome: a task that ended has nothing to cancel."""

from __future__ import annotations

import pytest
from django.urls import reverse

from audit.models import AuditEvent
from mcptasks import lifecycle
from mcptasks.models import Task

pytestmark = pytest.mark.django_db


def finished(running, owner: str = "alice") -> Task:
    task = running(owner)
    return lifecycle.task_complete(task_id=task.pk, attempt=task.attempt, result={"content": []})


def test_dashboard_cancel_of_an_ended_task_says_so_and_records_nothing(cast, client_for, running):
    task = finished(running)
    alice = client_for("alice")
    audited = AuditEvent.objects.filter(task_id=task.pk).count()
    response = alice.post(
        reverse("dashboard:cancel", args=[task.pk]), {"reason": "too late"}, follow=True
    )
    shown = [str(m) for m in response.context["messages"]]
    assert shown == ["Task already completed; nothing to cancel."]
    assert not any("Cancel requested" in m for m in shown)
    assert Task.objects.get(pk=task.pk).cancel_requested_at is None
    assert AuditEvent.objects.filter(task_id=task.pk).count() == audited


def test_dashboard_bulk_cancel_counts_an_ended_task_as_ended(cast, client_for, running):
    task = finished(running)
    olga = client_for("olga")
    olga.post(reverse("dashboard:bulk_cancel"), {"item": [task.pk], "reason": "sweep"})
    message = str(next(iter(olga.get("/tasks/").context["messages"])))
    assert message == "Bulk cancel: 1 already ended, nothing to cancel."
    assert not AuditEvent.objects.filter(task_id=task.pk, action="task.cancel_requested").exists()
