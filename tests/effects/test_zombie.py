"""The zombie drill (issue 20, point 2), in real worker processes: SIGSTOP a worker inside a
non-idempotent downstream call; another attempt takes over and finds the effect unknown; "not
applied" is refused until the paused attempt's lease has run out for the margin; the step runs
again under a newer fencing token; on SIGCONT the paused process calls the downstream with its
old token and the demo downstream refuses it — the key is applied once."""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from mcptasks import lifecycle
from mcptasks.models import Effect, EffectState, Task
from tests.effects import crash
from tests.effects.downstream import BEFORE, KIND, cloud
from tests.faults import harness
from tests.faults.harness import wait_for

pytestmark = [
    pytest.mark.live,
    pytest.mark.pg,
    pytest.mark.redis,
    pytest.mark.django_db(transaction=True),
]

MARGIN_S = 4
HOLD_S = 5.0  # the paused call's own wait: long over by the time it is resumed
TIMEOUT_S = 120.0


def test_a_paused_attempt_cannot_apply_a_key_twice_after_a_truthful_not_applied(
    cluster: harness.Cluster,
    effect_tasks: crash.EffectTasks,
    olga_actor: Any,
    settings: Any,
) -> None:
    settings.MCPTASKS_RECONCILE_MARGIN_S = MARGIN_S
    crash.start_cluster(cluster, concurrency=2)
    task_id = effect_tasks.create(idempotent=False, hold="before", hold_s=HOLD_S)
    key = f"{task_id}:{crash.STEP}"

    # Pause the pool process inside the effect, just before its downstream call.
    mark = wait_for(
        lambda: next((m for m in cloud.marks() if m["key"] == key and m["mark"] == BEFORE), None),
        TIMEOUT_S,
        "the effect to reach the downstream call",
    )
    zombie = mark["pid"]
    worker = cluster.worker_of(zombie)
    assert worker is not None and worker.pid != zombie  # a pool child, not the master
    os.kill(zombie, signal.SIGSTOP)
    try:
        # Its lease runs out; the reaper re-queues the task; the next attempt finds the effect
        # intended and waits for an operator.
        wait_for(
            lambda: Task.objects.filter(pk=task_id, state="needs_reconciliation").exists(),
            TIMEOUT_S,
            "the next attempt to find the effect unknown",
        )
        effect = Effect.objects.get(task_id=task_id, step=crash.STEP)
        assert (effect.state, effect.attempt) == (EffectState.UNKNOWN, 1)
        assert effect.holder_lease_expires_at is not None
        assert effect.not_applied_refused
        not_before = effect.not_applied_from
        assert not_before is not None

        # olga sees nothing downstream; "not applied" is refused while the paused attempt may
        # still be alive, and the refusal names the setting and the time.
        assert key not in cloud.applied()
        with pytest.raises(lifecycle.AttemptMayBeAlive, match="MCPTASKS_RECONCILE_MARGIN_S"):
            lifecycle.task_reconcile_effect(
                effect_id=effect.pk, actor=olga_actor, decision="not_applied", note="nothing"
            )
        assert Effect.objects.get(pk=effect.pk).state == EffectState.UNKNOWN
        refused = 1
        while True:
            try:
                lifecycle.task_reconcile_effect(
                    effect_id=effect.pk,
                    actor=olga_actor,
                    decision="not_applied",
                    note="the cloud has no such charge",
                )
                break
            except lifecycle.AttemptMayBeAlive:
                refused += 1
                time.sleep(0.2)
        assert timezone.now() >= not_before - timedelta(seconds=1)  # clock rounding
        # The step runs again (attempt 3, token 3) and the task completes.
        wait_for(
            lambda: Task.objects.filter(pk=task_id, state="completed").exists(),
            TIMEOUT_S,
            "the re-run step to complete the task",
        )
        assert cloud.applied()[key]["pid"] != zombie
    finally:
        os.kill(zombie, signal.SIGCONT)

    # Resumed, the zombie calls the downstream with its old token: refused, nothing applied.
    wait_for(
        lambda: any(c.get("refused") == 1 for c in cloud.calls(KIND) if c["key"] == key),
        TIMEOUT_S,
        "the stale call to reach the downstream",
    )
    assert cloud.applications_per_key()[key] == 1
    calls = [c for c in cloud.calls(KIND) if c["key"] == key]
    assert [c.get("refused") for c in calls] == [None, 1]
    # Its database writes are refused too: the task stays as the newer attempt left it.
    wait_for(
        lambda: harness.STALE_WARNING in worker.log(),
        TIMEOUT_S,
        "the stale attempt's write to be fenced off",
    )
    row = Task.objects.filter(pk=task_id).values("state", "attempt").get()
    assert row == {"state": "completed", "attempt": 3}
    assert Effect.objects.get(task_id=task_id, step=crash.STEP).state == EffectState.APPLIED
    assert refused >= 1


@pytest.fixture
def effect_tasks(cast: dict[str, dict[str, Any]]) -> crash.EffectTasks:
    return crash.EffectTasks(cast)
