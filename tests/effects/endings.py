"""Every end of a task with an open effect, in real worker processes (issue 20), shared by
tests/effects/test_endings.py and scripts/effect_crash_loop.py.

Each iteration leaves the non-idempotent ``charge`` effect of a task open — ``intended``, its
outcome unknown — just before the downstream call ("before") or just after it applied the key
("after"), and then ends the task one way:

- ``cancel``: the worker is SIGKILLed there and the owner cancels the task while its lease
  still runs (the reaper re-queues it and honours the cancel: ``cancelled``);
- ``attempt_limit``: the worker is SIGKILLed there, the workers run with
  ``MCPTASKS_MAX_ATTEMPTS`` 1, so the next claim fails the task before any replay (``failed``);
- ``ttl``: the worker is SIGKILLed there and the task's TTL is reached (set-up: its
  ``expires_at`` moved to now), so the expiry sweep fails it (``failed``);
- ``force_cancel``: the worker is SIGKILLed there and olga force-cancels it (``cancelled``);
- ``input_timeout``: no kill — the ``effect_asks`` tool asks a question in the middle of the
  effect's call and nobody answers it in time (``failed``).

Whatever the end, the effect must become ``unknown`` (audited with the cause), appear in olga's
reconciliation queue and the backlog metric, and olga's truthful decision (``applied`` with the
downstream's reference after, ``not_applied`` before — refused until the margin after the dead
attempt's lease passed) must be recorded and change nothing else.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from tests.effects import crash
from tests.effects.downstream import cloud
from tests.faults.checks import figures
from tests.faults.harness import Cluster

PATHS = ("cancel", "attempt_limit", "ttl", "force_cancel", "input_timeout")
HOLDS = ("before", "after")
END_STATE = {
    "cancel": "cancelled",
    "attempt_limit": "failed",
    "ttl": "failed",
    "force_cancel": "cancelled",
    "input_timeout": "failed",
}
CAUSE = {
    "cancel": "cancel",
    "attempt_limit": "failed",
    "ttl": "expired",
    "force_cancel": "force_cancel",
    "input_timeout": "input_timeout",
}
# The workers' environment these paths need (the attempt limit after one lost attempt).
WORKER_ENV = {"MCPTASKS_MAX_ATTEMPTS": "1"}


@dataclass
class Ending:
    path: str
    hold: str
    task_id: str
    owner: str
    killed: crash.Iteration | None = None  # the kill, for the paths that kill
    ended_s: float | None = None  # open effect (kill / question) -> end state
    opened_at: float = 0.0
    state: str = ""
    effect_state: str = ""
    causes: list[str] = field(default_factory=list)
    in_queue: bool = False
    decision: str = ""
    early_refusals: int = 0
    decided_s: float | None = None  # end state -> decision recorded
    problems: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.task_id} ({self.path}, {self.hold} the call)"

    @property
    def key(self) -> str:
        return f"{self.task_id}:{crash.STEP}"


def start(tasks: crash.EffectTasks, rounds: int) -> list[Ending]:
    """One task per path and hold, ``rounds`` times; owners alternate (acme, globex)."""
    endings = []
    for number, (path, hold) in enumerate(
        (p, h) for _ in range(rounds) for p in PATHS for h in HOLDS
    ):
        owner = "bob" if number % 2 else "alice"
        if path == "input_timeout":
            task_id = tasks.create(owner, tool="effect_asks", hold=hold, timeout_s=1.0)
        else:
            task_id = tasks.create(owner, idempotent=False, hold=hold, hold_s=crash.HOLD_S)
        endings.append(Ending(path, hold, task_id, owner))
    return endings


def _end_after_kill(ending: Ending, cast: dict[str, Any], olga: Any) -> None:
    from django.utils import timezone

    from audit.record import Actor
    from mcptasks import lifecycle
    from mcptasks.models import Task

    if ending.path == "cancel":
        lifecycle.task_request_cancel(
            task_id=ending.task_id,
            actor=Actor.for_user(cast[ending.owner]["user"], kind="principal"),
            reason="no longer needed",
        )
    elif ending.path == "ttl":
        # Set-up: the TTL is reached now (the expiry sweep does the rest).
        Task.objects.filter(pk=ending.task_id).update(expires_at=timezone.now())
    elif ending.path == "force_cancel":
        lifecycle.task_force_cancel(task_id=ending.task_id, actor=olga, reason="stop it")


def open_and_end(
    cluster: Cluster, endings: list[Ending], cast: dict[str, Any], olga: Any, timeout: float
) -> None:
    """Kill each killing path's worker at its mark and end the task its way; wait for the
    end states."""
    started = time.monotonic()
    killing = {}
    for e in endings:
        if e.path == "input_timeout":
            e.opened_at = started  # the question is asked as soon as a worker runs it
            continue
        e.killed = crash.Iteration(
            crash.Scenario(idempotent=False, hold=e.hold), e.task_id, started
        )
        killing[e.task_id] = e

    def end(killed: crash.Iteration) -> None:
        # At once: with the lease still running, the reaper has not re-queued the task yet.
        e = killing[killed.task_id]
        e.opened_at = killed.killed_at
        _end_after_kill(e, cast, olga)

    crash.kill_at_marks(
        cluster, [e.killed for e in killing.values() if e.killed], timeout, on_kill=end
    )
    for e in killing.values():
        assert e.killed is not None
        e.problems += [f"{e.name}: {line}" for line in crash.kill_problems(e.killed)]
    _wait_ended(endings, timeout)


def _wait_ended(endings: list[Ending], timeout: float) -> None:
    pending = {e.task_id: e for e in endings}
    deadline = time.monotonic() + timeout
    while pending:
        states = crash.task_states(list(pending))
        now = time.monotonic()
        for task_id, state in states.items():
            e = pending[task_id]
            if state in ("completed", "failed", "cancelled"):
                e.state, e.ended_s = state, now - e.opened_at
                del pending[task_id]
        if pending and now > deadline:
            raise AssertionError(
                f"{len(pending)} tasks did not end within {timeout:.0f} s: "
                f"{crash.task_states(list(pending))}"
            )
        time.sleep(0.05)


def backlog() -> int:
    from mcptasks import metrics

    for family in metrics.DatabaseCollector().collect():
        if family.name == "mcptasks_reconciliation_backlog":
            return int(family.samples[0].value)
    raise AssertionError("no mcptasks_reconciliation_backlog gauge")


def check_and_reconcile(endings: list[Ending], olga: Any, olga_user: Any, timeout: float) -> int:
    """Check each ended task's effect is unknown, audited and queued; decide it truthfully
    (waiting out the margin for "not applied"); return the backlog metric before deciding."""
    from audit.models import AuditEvent
    from mcptasks import access
    from mcptasks.models import Effect, Task

    queue = set(access.reconcilable_effects(olga_user).values_list("task_id", "step"))
    before_deciding = backlog()
    applied = cloud.applied()
    for e in endings:
        if e.state != END_STATE[e.path]:
            e.problems.append(f"{e.name}: ended {e.state}, expected {END_STATE[e.path]}")
        effect = Effect.objects.filter(task_id=e.task_id, step=crash.STEP).first()
        e.effect_state = effect.state if effect else "missing"
        e.causes = [
            data.get("cause", "")
            for data in AuditEvent.objects.filter(task_id=e.task_id, action="effect.unknown")
            .order_by("seq")
            .values_list("data", flat=True)
        ]
        e.in_queue = (e.task_id, crash.STEP) in queue
        if e.effect_state != "unknown":
            e.problems.append(f"{e.name}: the effect is {e.effect_state}, not unknown")
            continue
        if e.causes != [CAUSE[e.path]]:
            e.problems.append(f"{e.name}: effect.unknown causes {e.causes}")
        if not e.in_queue:
            e.problems.append(f"{e.name}: the effect is not in olga's queue")
        assert effect is not None
        truth = applied.get(e.key, {}).get("charge_id", "")
        e.decision = "applied" if truth else "not_applied"
        if e.decision != ("applied" if e.hold == "after" else "not_applied"):
            e.problems.append(f"{e.name}: the downstream says {e.decision}")
        task_before = Task.objects.filter(pk=e.task_id).values("state", "result", "error").get()
        ended_at = time.monotonic()
        e.early_refusals = crash.decide(
            effect.pk, olga, e.decision, f"checked the downstream: {e.decision}", truth, timeout
        )
        e.decided_s = time.monotonic() - ended_at
        if Task.objects.filter(pk=e.task_id).values(*task_before).get() != task_before:
            e.problems.append(f"{e.name}: deciding the effect changed the ended task")
        decided = Effect.objects.get(pk=effect.pk)
        expected = "reconciled_applied" if e.decision == "applied" else "reconciled_not_applied"
        if (decided.state, decided.external_ref) != (expected, truth):
            e.problems.append(f"{e.name}: recorded {decided.state} {decided.external_ref!r}")
        calls = cloud.calls_per_key().get(e.key, 0)
        if calls != (1 if e.hold == "after" else 0):
            e.problems.append(f"{e.name}: the downstream got {calls} calls")
    return before_deciding


def problems(endings: list[Ending]) -> list[str]:
    return [line for e in endings for line in e.problems]


def dropped(endings: list[Ending]) -> int:
    """Open effects that did not reach the operators' queue (the issue's count: must be 0)."""
    return sum(1 for e in endings if e.effect_state != "unknown" or not e.in_queue)


def summary(endings: list[Ending]) -> str:
    lines = []
    for path in PATHS:
        for hold in HOLDS:
            its = [e for e in endings if e.path == path and e.hold == hold]
            if not its:
                continue
            lines.append(
                f"{path}, {hold} the call: {len(its)}; open -> {END_STATE[path]}: "
                f"{figures([e.ended_s or 0.0 for e in its])}; unknown and queued "
                f"{sum(1 for e in its if e.effect_state == 'unknown' and e.in_queue)}/{len(its)}; "
                f"'{its[0].decision or '?'}' recorded after "
                f"{figures([e.decided_s or 0.0 for e in its])} "
                f"({sum(e.early_refusals for e in its)} early refusals)"
            )
    lines.append(f"dropped effects: {dropped(endings)}/{len(endings)}")
    return "\n".join(lines)


def run(
    cluster: Cluster,
    tasks: crash.EffectTasks,
    cast: dict[str, Any],
    olga: Any,
    olga_user: Any,
    *,
    rounds: int,
    timeout: float,
    wave: int = 2,
) -> tuple[list[Ending], list[int]]:
    """``rounds`` rounds of every path and hold, ``wave`` rounds at a time. Returns the
    iterations and the backlog metric seen before each wave's decisions."""
    endings: list[Ending] = []
    backlogs: list[int] = []
    for first in range(0, rounds, wave):
        batch = start(tasks, min(wave, rounds - first))
        open_and_end(cluster, batch, cast, olga, timeout)
        backlogs.append(check_and_reconcile(batch, olga, olga_user, timeout))
        expected = sum(1 for e in batch if e.effect_state == "unknown")
        if backlogs[-1] < expected:
            for e in batch:
                e.problems.append(f"{e.name}: backlog metric {backlogs[-1]} < {expected}")
        endings += batch
    return endings, backlogs
