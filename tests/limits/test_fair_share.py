"""Fair share (issue 22): caps on running tasks per tenant and principal, checked at claim; a
capped claim changes nothing; redelivery picks queued work round-robin by tenant; worker keepers
run the sweeps when beat's are late. (Two real Celery workers: tests/faults/test_fair_share.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from audit.models import AuditEvent
from mcptasks import embedded, fairshare, keeper, lifecycle, sweeps
from mcptasks.models import Heartbeat, Task, TaskState

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def caps(settings: Any) -> Any:
    settings.MCPTASKS_MAX_RUNNING_TASKS_PER_TENANT = 0
    settings.MCPTASKS_MAX_RUNNING_TASKS_PER_PRINCIPAL = 0
    settings.MCPTASKS_EMBEDDED_WORKER = True
    embedded.clear()
    yield settings
    embedded.clear()


def claim(task: Any) -> Task:
    return lifecycle.task_claim(task_id=task.pk, worker="test-worker")


def cap_tenant(cast: dict[str, Any], owner: str, cap: int | None) -> None:
    """What an administrator sets on the tenant in the Django admin."""
    tenant = cast[owner]["tenant"]
    tenant.max_running_tasks = cap
    tenant.save()


def test_claim_at_the_tenants_cap_is_refused_and_changes_nothing(caps, cast, make_task):
    cap_tenant(cast, "alice", 1)
    running, waiting = make_task("alice"), make_task("adam")
    claim(running)
    before = Task.objects.values("state", "version", "attempt", "updated_at").get(pk=waiting.pk)
    events = AuditEvent.objects.count()

    with pytest.raises(lifecycle.AtCapacity, match=r"cap 1"):
        claim(waiting)

    assert (
        Task.objects.values("state", "version", "attempt", "updated_at").get(pk=waiting.pk)
        == before
    )
    assert before["state"] == TaskState.QUEUED
    assert AuditEvent.objects.count() == events
    # Another tenant is not held back by acme's cap.
    assert claim(make_task("bob")).state == TaskState.RUNNING


def test_claim_at_the_principals_cap_is_refused_but_another_principal_runs(caps, cast, make_task):
    caps.MCPTASKS_MAX_RUNNING_TASKS_PER_PRINCIPAL = 2
    claim(make_task("alice"))
    claim(make_task("alice"))
    with pytest.raises(lifecycle.AtCapacity, match=r"principal runs 2 tasks \(cap 2\)"):
        claim(make_task("alice"))
    assert claim(make_task("adam")).state == TaskState.RUNNING


def test_tenant_field_overrides_the_setting_and_zero_means_no_cap(caps, cast, make_task):
    caps.MCPTASKS_MAX_RUNNING_TASKS_PER_TENANT = 1
    cap_tenant(cast, "alice", 0)
    for _ in range(3):
        assert claim(make_task("alice")).state == TaskState.RUNNING
    cap_tenant(cast, "alice", None)  # back to the setting: 1, and 3 already run
    with pytest.raises(lifecycle.AtCapacity, match=r"runs 3 tasks \(cap 1\)"):
        claim(make_task("alice"))


def test_redelivery_order_is_round_robin_by_tenant_and_skips_capped_tenants(caps, cast, make_task):
    acme = [make_task("alice") for _ in range(4)]
    globex = [make_task("bob") for _ in range(2)]
    ids = fairshare.fair_queued_ids(10)
    assert ids == [acme[0].pk, globex[0].pk, acme[1].pk, globex[1].pk, acme[2].pk, acme[3].pk]

    cap_tenant(cast, "alice", 2)
    claim(acme[0])
    # acme runs 1 of 2: one more of its queued tasks is redelivered, globex's all.
    assert fairshare.fair_queued_ids(10) == [acme[1].pk, globex[0].pk, globex[1].pk]
    claim(acme[1])
    assert fairshare.fair_queued_ids(10) == [globex[0].pk, globex[1].pk]


def test_a_finished_run_delivers_the_next_task_its_cap_held_back(caps, cast, make_task):
    from mcptasks import jobs

    cap_tenant(cast, "alice", 1)
    first, second = make_task("alice"), make_task("alice")
    claim(first)
    embedded.clear()
    jobs.run_task.run(task_id=second.pk)  # refused: acme runs its cap
    assert Task.objects.get(pk=second.pk).state == TaskState.QUEUED
    assert embedded.pending() == 0  # a refused claim delivers nothing (no busy loop)

    fairshare.dispatch_ready(first.pk)  # still running: no room, nothing delivered
    assert embedded.pending() == 0
    lifecycle.task_complete(task_id=first.pk, attempt=1, result={"content": []})
    fairshare.dispatch_ready(first.pk)  # what jobs.run_task does after a run
    assert embedded.drain() == 1
    assert Task.objects.get(pk=second.pk).state == TaskState.COMPLETED


def test_a_worker_keeper_runs_the_sweeps_when_beats_are_late(caps, cast, make_task):
    Heartbeat.objects.all().delete()
    assert keeper.sweeps_late()
    assert keeper.tick("w1@host", 2) is True
    assert Heartbeat.objects.get(name="worker:w1@host").data["concurrency"] == 2
    assert not keeper.sweeps_late()
    # A sweep that ran recently (beat's) leaves the keeper idle.
    assert keeper.tick("w1@host", 2) is False
    sweeps.run_all()
    assert keeper.tick("w2@host", 1) is False


def test_a_finished_run_below_the_caps_sends_no_second_message(caps, cast, make_task):
    """Below its caps no claim of the tenant was refused: each queued task still has its own
    message on the way, so a finished run delivers nothing more (issue 22, B6)."""
    caps.MCPTASKS_MAX_RUNNING_TASKS_PER_TENANT = 8
    caps.MCPTASKS_MAX_RUNNING_TASKS_PER_PRINCIPAL = 4
    first, _waiting = make_task("alice"), make_task("alice")
    claim(first)
    lifecycle.task_complete(task_id=first.pk, attempt=1, result={"content": []})
    embedded.clear()
    fairshare.dispatch_ready(first.pk)
    assert embedded.pending() == 0


def test_a_finished_run_at_the_principals_cap_delivers_that_principals_next_task(
    caps, cast, make_task
):
    caps.MCPTASKS_MAX_RUNNING_TASKS_PER_PRINCIPAL = 1
    first = make_task("alice")
    adams, alices = make_task("adam"), make_task("alice")  # adam's is older
    claim(first)
    embedded.clear()
    lifecycle.task_complete(task_id=first.pk, attempt=1, result={"content": []})
    fairshare.dispatch_ready(first.pk)
    assert embedded.drain() == 1
    assert Task.objects.get(pk=alices.pk).state == TaskState.COMPLETED
    assert Task.objects.get(pk=adams.pk).state == TaskState.QUEUED


def test_a_claim_reports_whether_it_fills_a_cap(caps, cast, make_task):
    from mcptasks.lifecycle.execution import claim as claim_with_room

    assert not claim_with_room(task_id=make_task("alice").pk, worker="w").fills_cap  # no caps
    cap_tenant(cast, "alice", 3)
    assert not claim_with_room(task_id=make_task("alice").pk, worker="w").fills_cap  # 2 of 3
    assert claim_with_room(task_id=make_task("alice").pk, worker="w").fills_cap  # 3 of 3


def test_a_run_whose_claim_filled_no_cap_skips_dispatch_ready(caps, cast, make_task, monkeypatch):
    """dispatch_ready's reads are paid only by a run whose claim left a cap reached (issue 23)."""
    from mcptasks import jobs

    calls: list[str] = []
    monkeypatch.setattr(fairshare, "dispatch_ready", calls.append)
    caps.MCPTASKS_MAX_RUNNING_TASKS_PER_TENANT = 8
    jobs.run_task.run(task_id=make_task("alice").pk)
    assert calls == []
    cap_tenant(cast, "alice", 1)
    filled = make_task("alice")
    jobs.run_task.run(task_id=filled.pk)
    assert calls == [filled.pk]
    assert Task.objects.get(pk=filled.pk).state == TaskState.COMPLETED
