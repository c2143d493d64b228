"""Legal holds stop audit retention and TTL deletion for what they cover, and are audited."""

from __future__ import annotations

import io
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from audit.chain import verify_chain
from audit.holds import HoldError, place_hold, release_hold
from audit.models import AuditEvent, LegalHold
from audit.record import Actor
from audit.retention import RetentionHeld, purge_due, purge_tenant
from mcptasks import lifecycle, sweeps
from mcptasks.models import Task

pytestmark = pytest.mark.django_db
ACME = "tenant:acme"
SYSTEM = Actor.system("test")


def command(*args: str) -> tuple[bool, str]:
    out = io.StringIO()
    try:
        call_command(*args, stdout=out)
    except CommandError as exc:
        return False, out.getvalue() + str(exc)
    return True, out.getvalue()


@pytest.fixture
def aged(record_events: Callable[..., Any]) -> Callable[..., list[AuditEvent]]:
    def make(count: int, days_ago: float, **kwargs: Any) -> list[AuditEvent]:
        with time_machine.travel(timezone.now() - timedelta(days=days_ago), tick=False):
            return record_events(count, **kwargs)

    return make


@pytest.fixture
def finished_task(make_task: Callable[..., Any], settings: Any) -> Callable[[], str]:
    """A completed task with a 1 s TTL and no grace: due for deletion 2 s from now."""
    settings.MCPTASKS_TERMINAL_GRACE_S = 0

    def make() -> str:
        task = lifecycle.task_claim(task_id=make_task(ttl_ms=1000).pk, worker="w")
        lifecycle.task_complete(task_id=task.pk, attempt=task.attempt, result={"content": []})
        return str(task.pk)

    return make


def test_a_tenant_hold_blocks_purge_until_released(aged: Callable[..., Any]) -> None:
    aged(4, days_ago=40)
    hold = place_hold(tenant_slug="acme", reason="matter 2026-17", actor=SYSTEM)
    with pytest.raises(RetentionHeld, match=f"legal hold #{hold.pk}"):
        purge_tenant(tenant_slug="acme", older_than_days=30, actor=SYSTEM)
    ok, out = command("purge_audit", "--tenant", "acme", "--older-than-days", "30")
    assert not ok and "matter 2026-17" in out and "nothing purged" in out
    assert purge_due() == []  # the sweep skips a held tenant
    assert AuditEvent.objects.filter(chain=ACME, task_id="task-0").exists()
    release_hold(hold_id=hold.pk, reason="matter closed", actor=SYSTEM)
    result = purge_tenant(tenant_slug="acme", older_than_days=30, actor=SYSTEM)
    assert result.purged >= 4 and result.held_by is None
    assert not AuditEvent.objects.filter(chain=ACME, task_id="task-0").exists()
    assert verify_chain(ACME).ok


def test_a_task_hold_stops_the_purge_before_that_tasks_events(
    aged: Callable[..., Any],
) -> None:
    aged(2, days_ago=50)
    held = aged(1, days_ago=45, task_id="held-task")[0]
    aged(2, days_ago=40)
    hold = place_hold(tenant_slug="acme", task_id="held-task", reason="subpoena", actor=SYSTEM)
    result = purge_tenant(tenant_slug="acme", older_than_days=30, actor=SYSTEM)
    assert result.checkpoint_seq == held.seq - 1 and result.held_by == hold.pk
    assert AuditEvent.objects.filter(chain=ACME, seq=held.seq, task_id="held-task").exists()
    purged = AuditEvent.objects.get(chain=ACME, seq=result.event_seq)
    assert purged.data["stopped_by_hold"] == hold.pk
    assert verify_chain(ACME).ok
    release_hold(hold_id=hold.pk, reason="done", actor=SYSTEM)
    again = purge_tenant(tenant_slug="acme", older_than_days=30, actor=SYSTEM)
    assert again.purged == 3 and again.held_by is None  # the held event and the two after
    assert verify_chain(ACME).ok


def test_a_hold_blocks_ttl_deletion_of_terminal_tasks_and_release_lets_it_proceed(
    finished_task: Callable[[], str],
) -> None:
    on_task, in_tenant, other = finished_task(), finished_task(), finished_task()
    task_hold = place_hold(tenant_slug="acme", task_id=on_task, reason="litigation", actor=SYSTEM)
    with time_machine.travel(timezone.now() + timedelta(seconds=5)):
        assert not lifecycle.task_purge(task_id=on_task)  # the deletion path asks too
        assert sweeps.purge_tasks() == 2  # the other two
        assert Task.objects.filter(pk=on_task).exists()
        assert not Task.objects.filter(pk__in=[in_tenant, other]).exists()
    release_hold(hold_id=task_hold.pk, reason="settled", actor=SYSTEM)
    with time_machine.travel(timezone.now() + timedelta(seconds=5)):
        assert sweeps.purge_tasks() == 1
    assert not Task.objects.filter(pk=on_task).exists()


def test_a_tenant_hold_blocks_ttl_deletion_of_all_its_tasks(
    finished_task: Callable[[], str],
) -> None:
    task_id = finished_task()
    hold = place_hold(tenant_slug="acme", reason="regulator inquiry", actor=SYSTEM)
    with time_machine.travel(timezone.now() + timedelta(seconds=5)):
        assert sweeps.purge_tasks() == 0
        assert not lifecycle.task_purge(task_id=task_id)
    release_hold(hold_id=hold.pk, reason="closed", actor=SYSTEM)
    with time_machine.travel(timezone.now() + timedelta(seconds=5)):
        assert sweeps.purge_tasks() == 1


def test_placing_and_releasing_are_audited_with_who_and_why(
    cast: dict[str, Any], finished_task: Callable[[], str]
) -> None:
    task_id = finished_task()
    ok, out = command(
        "legal_hold", "place", "--tenant", "acme", "--task", task_id, "--reason", "case 9",
        "--as", "olga",
    )  # fmt: skip
    assert ok, out
    hold = LegalHold.objects.get()
    placed = AuditEvent.objects.get(chain=ACME, action="legal_hold.placed")
    assert (placed.actor_display, placed.actor_kind, placed.task_id) == (
        "olga",
        "operator",
        task_id,
    )
    assert placed.data == {"hold": hold.pk, "scope": "task", "reason": "case 9"}
    ok, out = command("legal_hold", "list")
    assert ok and f"#{hold.pk}  acme  {task_id}  active" in out and "by olga: case 9" in out
    ok, out = command(
        "legal_hold", "release", str(hold.pk), "--reason", "dismissed", "--as", "olga"
    )
    assert ok, out
    released = AuditEvent.objects.get(chain=ACME, action="legal_hold.released")
    assert released.data == {"hold": hold.pk, "scope": "task", "reason": "dismissed"}
    hold.refresh_from_db()
    assert hold.released_by == "olga" and hold.release_reason == "dismissed"
    assert command("legal_hold", "list")[1] == ""
    assert "released" in command("legal_hold", "list", "--all")[1]


def test_bad_hold_requests_are_refused_and_change_nothing(cast: dict[str, Any]) -> None:
    before = AuditEvent.objects.count()
    for kwargs, message in (
        ({"tenant_slug": "nope", "reason": "x"}, "no tenant 'nope'"),
        ({"tenant_slug": "acme", "reason": "  "}, "needs a reason"),
        ({"tenant_slug": "acme", "task_id": "no-such-task", "reason": "x"}, "has no task"),
    ):
        with pytest.raises(HoldError, match=message):
            place_hold(actor=SYSTEM, **kwargs)
    with pytest.raises(HoldError, match="no active legal hold #999"):
        release_hold(hold_id=999, reason="x", actor=SYSTEM)
    ok, out = command("legal_hold", "release", "999", "--reason", "x")
    assert not ok and "no active legal hold #999" in out
    assert not LegalHold.objects.exists() and AuditEvent.objects.count() == before
