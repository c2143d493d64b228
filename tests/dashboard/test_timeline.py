"""A timeline an SRE can read (issue 22): each durable sleep is one row with its duration, and
crash re-runs are shown apart from resumes."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.urls import reverse
from django.utils import timezone

from audit.record import Actor
from mcptasks import lifecycle
from mcptasks.models import Task

pytestmark = pytest.mark.django_db


def rows(html: str) -> list[str]:
    timeline = html.split('<ol class="timeline">', 1)[1].split("</ol>", 1)[0]
    return [
        re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", item)).strip()
        for item in timeline.split("<li")[1:]
    ]


def test_sleeps_fold_into_one_row_and_crash_reruns_show_apart_from_resumes(
    cast, make_task, client_for
):
    origin = timezone.now()
    with time_machine.travel(origin, tick=False) as clock:
        task = make_task("alice")
        attempt = lifecycle.task_claim(task_id=task.pk, worker="w").attempt
        for seconds in (5, 90):
            lifecycle.task_sleep(
                task_id=task.pk,
                attempt=attempt,
                wake_at=timezone.now() + timedelta(seconds=seconds),
            )
            clock.shift(timedelta(seconds=seconds))
            lifecycle.task_wake(task_id=task.pk)
            attempt = lifecycle.task_claim(task_id=task.pk, worker="w").attempt
        # The worker dies: its lease runs out, the reaper re-queues, another worker re-runs.
        # (A fixed past instant: the reaper compares with the database clock, not the
        # travelled one.)
        Task.objects.filter(pk=task.pk).update(lease_expires_at=datetime(2000, 1, 1, tzinfo=UTC))
        clock.shift(timedelta(seconds=1))
        lifecycle.task_requeue(task_id=task.pk)
        lifecycle.task_claim(task_id=task.pk, worker="w2")
        lifecycle.task_fail(
            task_id=task.pk, actor=Actor.system("test"), error=lifecycle.error_object("boom")
        )

    page = client_for("olga").get(reverse("dashboard:task", args=[task.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    shown = rows(html)
    assert not any(row.startswith(("Woken", "Timer")) for row in shown), shown
    slept = [row for row in shown if "Slept" in row]
    assert len(slept) == 2, shown
    assert "Slept 5.0 s on a durable timer; resumed as run 2" in slept[0]
    assert "Slept 90.0 s on a durable timer; resumed as run 3" in slept[1]
    started = [row for row in shown if row.split(" ")[1:2] == ["Started"] or "Started run" in row]
    assert len(started) == 1, shown
    rerun = [row for row in shown if "Re-run run 4, after its worker was lost" in row]
    assert len(rerun) == 1, shown
    assert "Crash re-runs</dt><dd>1 of 5" in html.replace("\n", "")
    assert re.search(r"Runs</dt><dd>4\b", html)
