"""kill -9 of a worker between ``intended`` and the downstream call, and between the call and
``applied``, for idempotent and non-idempotent effects (issue 6), in real worker processes.

CI runs ``MCPTASKS_EFFECT_KILLS`` kills per case (default 5); scripts/effect_crash_loop.py runs
the issue's 50 standalone and prints the figures.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest

from audit.record import Actor
from mcptasks import access, lifecycle
from mcptasks.models import Effect, EffectState, Task
from tests.effects import crash
from tests.effects.downstream import AFTER, cloud
from tests.faults import harness
from tests.faults.harness import wait_for

pytestmark = [
    pytest.mark.live,
    pytest.mark.pg,
    pytest.mark.redis,
    pytest.mark.django_db(transaction=True),
]

KILLS = int(os.environ.get("MCPTASKS_EFFECT_KILLS", "5"))
TIMEOUT_S = 120.0


@pytest.fixture
def effect_tasks(cast: dict[str, dict[str, Any]]) -> crash.EffectTasks:
    return crash.EffectTasks(cast)


def test_killed_effects_complete_once_or_wait_for_olga(
    cluster: harness.Cluster, effect_tasks: crash.EffectTasks, olga_actor: Any
) -> None:
    crash.start_cluster(cluster)
    started = time.monotonic()
    scenarios = [scenario for _ in range(KILLS) for scenario in crash.SCENARIOS]
    iterations = crash.run(cluster, effect_tasks, scenarios, olga_actor, timeout=TIMEOUT_S)
    print("\n" + crash.summary(iterations, time.monotonic() - started))
    print(crash.slowest(iterations))
    assert crash.problems(iterations) == []
    # Recovery is the lease running out and the reaper's sweep, not a timeout of minutes.
    assert max(it.settled_s or 0.0 for it in iterations) <= harness.SETTLE_S


def test_unknown_effects_fail_or_outlive_a_cancel_and_are_decided_once(
    cluster: harness.Cluster,
    effect_tasks: crash.EffectTasks,
    olga_actor: Any,
    users: dict[str, Any],
    mcp_for: Callable[[str], Any],
    audit_of: Callable[..., list[tuple[str, str, dict[str, Any]]]],
) -> None:
    crash.start_cluster(cluster)
    killed = crash.Scenario(idempotent=False, hold="before")
    to_fail, to_force_cancel, to_cancel = effect_tasks.start([killed] * 3)
    crash.kill_at_marks(cluster, [to_fail, to_force_cancel, to_cancel], TIMEOUT_S)
    crash.wait_settled([to_fail, to_force_cancel, to_cancel], TIMEOUT_S)
    waiting = [to_fail.task_id, to_force_cancel.task_id, to_cancel.task_id]

    # Waiting for olga: working on the wire, with a message saying so; nothing to answer.
    owner = Task.objects.select_related("principal").get(pk=to_fail.task_id).principal
    reply = mcp_for(owner.username).call("tasks/get", {"taskId": to_fail.task_id})
    assert reply.result["status"] == "working"
    assert "operator" in reply.result["statusMessage"]
    assert "inputRequests" not in reply.result
    # The effects are in olga's queue, and in no member's.
    queue = set(access.reconcilable_effects(users["olga"]).values_list("task_id", flat=True))
    assert set(waiting) <= queue
    assert not access.reconcilable_effects(users["alice"]).filter(task_id__in=waiting).exists()

    # fail: the task fails, naming the step and olga's reason; a second decision is refused.
    failing = crash.unknown_effect_id(to_fail.task_id)
    task = lifecycle.task_reconcile_effect(
        effect_id=failing,
        actor=olga_actor,
        decision="fail",
        note="the cloud has no record; do not retry",
    )
    assert task.state == "failed"
    assert "'charge'" in task.error["message"] and "do not retry" in task.error["message"]
    with pytest.raises(lifecycle.EffectNotUnknown):
        lifecycle.task_reconcile_effect(
            effect_id=failing, actor=olga_actor, decision="applied", note="second", external_ref="x"
        )
    assert Effect.objects.get(pk=failing).state == EffectState.FAILED
    assert [
        (a, who, d["decision"], d["state"])
        for a, who, d in audit_of(to_fail.task_id, "effect.reconciled")
    ] == [("effect.reconciled", "olga", "fail", "failed")]

    # A force-cancel (olga) and a cancel (the owner) end the task and leave the unknown effect
    # in the queue; deciding it then records what happened and changes nothing else.
    lifecycle.task_force_cancel(
        task_id=to_force_cancel.task_id, actor=olga_actor, reason="the release was called off"
    )
    cancelled_by = Task.objects.get(pk=to_cancel.task_id).principal
    lifecycle.task_request_cancel(
        task_id=to_cancel.task_id,
        reason="no longer needed",
        actor=Actor.for_user(cancelled_by, kind="principal"),
    )
    for it in (to_force_cancel, to_cancel):
        assert Task.objects.get(pk=it.task_id).state == "cancelled"
        assert Effect.objects.get(task_id=it.task_id, step=crash.STEP).state == "unknown"
    queue = set(access.reconcilable_effects(users["olga"]).values_list("task_id", flat=True))
    assert {to_force_cancel.task_id, to_cancel.task_id} <= queue
    for it in (to_force_cancel, to_cancel):
        _assert_decision_only_records(it.task_id, "not_applied", "", olga_actor, audit_of)
    # Killed before the call and never run again: the downstream never saw these keys.
    assert not {k for k in cloud.calls_per_key() if k.split(":")[0] in waiting}


def test_force_cancel_mid_effect_leaves_an_unknown_effect_that_is_only_recorded(
    cluster: harness.Cluster,
    effect_tasks: crash.EffectTasks,
    olga_actor: Any,
    audit_of: Callable[..., list[tuple[str, str, dict[str, Any]]]],
) -> None:
    crash.start_cluster(cluster)
    hold_s = 3.0
    task_id = effect_tasks.create(idempotent=False, hold="after", hold_s=hold_s)
    key = f"{task_id}:{crash.STEP}"
    holder = wait_for(
        lambda: next(
            (m["pid"] for m in cloud.marks() if m["key"] == key and m["mark"] == AFTER), None
        ),
        TIMEOUT_S,
        "the effect to call the downstream",
    )
    assert Effect.objects.get(task_id=task_id, step=crash.STEP).state == "intended"

    lifecycle.task_force_cancel(task_id=task_id, actor=olga_actor, reason="stop the rollout")
    assert Effect.objects.get(task_id=task_id, step=crash.STEP).state == "unknown"
    assert [(d["step"], d["cause"]) for _, _, d in audit_of(task_id, "effect.unknown")] == [
        ("charge", "force_cancel")
    ]
    # The worker wakes from its call, finds itself fenced off and writes nothing.
    worker = cluster.worker_of(holder)
    assert worker is not None
    wait_for(
        lambda: f"cannot write task {task_id}" in worker.log(),
        hold_s + 30,
        "the force-cancelled attempt to be refused its write",
    )
    assert Effect.objects.get(task_id=task_id, step=crash.STEP).state == "unknown"

    # olga checks the cloud: it was applied. Recorded, and the task stays cancelled.
    reference = cloud.applied()[key]["charge_id"]
    _assert_decision_only_records(task_id, "applied", reference, olga_actor, audit_of)
    assert cloud.calls_per_key()[key] == 1
    assert f"{task_id}:receipt" not in cloud.calls_per_key()


def _assert_decision_only_records(
    task_id: str, decision: str, reference: str, actor: Any, audit_of: Callable[..., Any]
) -> None:
    before = (
        Task.objects.filter(pk=task_id)
        .values("state", "version", "result", "error", "attempt", "status_message")
        .get()
    )
    effect_id = crash.unknown_effect_id(task_id)
    crash.decide(effect_id, actor, decision, "checked the cloud console", reference)
    assert Task.objects.get(pk=task_id).state == "cancelled"
    after = Task.objects.filter(pk=task_id).values(*before).get()
    assert after == before
    effect = Effect.objects.get(pk=effect_id)
    assert (
        effect.state
        == {
            "applied": EffectState.RECONCILED_APPLIED,
            "not_applied": EffectState.RECONCILED_NOT_APPLIED,
        }[decision]
    )
    assert effect.external_ref == reference
    assert effect.reconciled_by.username == "olga"
    assert [
        (who, d["decision"], d["state"], d["external_ref"])
        for _, who, d in audit_of(task_id, "effect.reconciled")
    ] == [("olga", decision, "cancelled", reference)]
    with pytest.raises(lifecycle.EffectNotUnknown):
        lifecycle.task_reconcile_effect(
            effect_id=effect_id, actor=actor, decision="fail", note="second"
        )
    assert Task.objects.filter(pk=task_id).values(*before).get() == before
