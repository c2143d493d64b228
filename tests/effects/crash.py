"""kill -9 around an effect (issue 6), shared by tests/effects/test_crash.py and
scripts/effect_crash_loop.py.

Each iteration starts an ``effect_crash`` task whose first effect (``charge``) holds, the first
time, at one point: just after ``intended`` was committed and before the downstream call
("before"), or just after the downstream call and before ``applied`` ("after"). The watcher sees
the mark the effect writes there, checks the records say what that point means, and SIGKILLs the
worker's pool process that wrote it. Then:

- an idempotent effect runs again with the same key on replay, so the task completes and the
  downstream has applied each key exactly once;
- a non-idempotent effect has an unknown outcome: the task waits in ``needs_reconciliation``
  (wire status ``working``, a message saying it waits for an operator) until olga reconciles it
  truthfully — ``not_applied`` after a kill before the call (the step runs again), ``applied``
  with the downstream's reference after a kill after the call (the step continues with it) —
  and a second decision on the same effect is refused.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.effects.downstream import HOLD_MARKS, cloud
from tests.faults.checks import figures, lease_pid
from tests.faults.harness import Cluster

TOOL = "effect_crash"
STEP = "charge"
HOLD_S = 60.0  # far longer than any kill takes: the effect is still held when it is killed
RECONCILER = "olga"


@dataclass(frozen=True)
class Scenario:
    idempotent: bool
    hold: str  # "before" or "after" the downstream call

    @property
    def name(self) -> str:
        kind = "idempotent" if self.idempotent else "non-idempotent"
        return f"{kind}, kill {self.hold} the call"

    @property
    def decision(self) -> str:
        """olga's truthful decision on the unknown effect (non-idempotent only)."""
        return "applied" if self.hold == "after" else "not_applied"

    @property
    def settles_in(self) -> str:
        return "completed" if self.idempotent else "needs_reconciliation"


SCENARIOS = tuple(
    Scenario(idempotent, hold) for idempotent in (True, False) for hold in ("before", "after")
)


@dataclass
class Iteration:
    scenario: Scenario
    task_id: str
    created_at: float
    killed_at: float = 0.0
    killed_pid: int = 0
    at_kill: dict[str, Any] = field(default_factory=dict)
    settled_s: float | None = None  # kill → completed / needs_reconciliation
    wire_while_waiting: dict[str, Any] = field(default_factory=dict)
    decided_at: float = 0.0
    second_decision_refused: bool | None = None
    completed_s: float | None = None  # decision → completed

    @property
    def key(self) -> str:
        return f"{self.task_id}:{STEP}"


class EffectTasks:
    """Creates ``effect_crash`` tasks through lifecycle, as the MCP endpoint would."""

    def __init__(self, cast: dict[str, dict[str, Any]]) -> None:
        from mcptasks.tools.registry import registry

        tool_def = registry.get(TOOL)
        assert tool_def is not None, f"{TOOL} is not loaded (tests.toolpack in the tool packs?)"
        self.cast, self.tool_def = cast, tool_def

    def create(self, owner: str = "alice", *, tool: str = TOOL, **arguments: Any) -> str:
        from audit.record import Actor
        from mcptasks import lifecycle
        from mcptasks.tools.registry import registry

        entry = self.cast[owner]
        tool_def = registry.get(tool)
        assert tool_def is not None, f"{tool} is not loaded"
        task, _ = lifecycle.task_create(
            spec=lifecycle.NewTask(
                tenant_id=entry["tenant"].pk,
                principal_id=entry["user"].pk,
                tool_name=tool,
                arguments=arguments,
                policy_revision=tool_def.policy_revision,
                ttl_ms=tool_def.ttl_ms,
                client_capabilities={"extensions": {"io.modelcontextprotocol/tasks": {}}},
            ),
            actor=Actor.for_user(entry["user"], kind="principal"),
        )
        return task.pk

    def start(self, scenarios: list[Scenario], hold_s: float = HOLD_S) -> list[Iteration]:
        """One task per scenario, alternately alice's (acme) and bob's (globex)."""
        return [
            Iteration(
                scenario,
                self.create(
                    owner="bob" if number % 2 else "alice",
                    idempotent=scenario.idempotent,
                    hold=scenario.hold,
                    hold_s=hold_s,
                ),
                time.monotonic(),
            )
            for number, scenario in enumerate(scenarios)
        ]


def start_cluster(cluster: Cluster, concurrency: int = 4) -> None:
    """Two prefork workers of ``concurrency`` pool processes each, and beat."""
    workers = [
        cluster.start_worker(name, concurrency=concurrency, wait=False) for name in ("A", "B")
    ]
    for worker in workers:
        worker.wait_log(r" ready\.")
    cluster.start_beat()


# ---------------------------------------------------------------- reading the records
def effect_states(task_ids: list[str], step: str = STEP) -> dict[str, str]:
    from mcptasks.models import Effect

    return dict(
        Effect.objects.filter(task_id__in=task_ids, step=step).values_list("task_id", "state")
    )


def task_states(task_ids: list[str]) -> dict[str, str]:
    from mcptasks.models import Task

    return dict(Task.objects.filter(pk__in=task_ids).values_list("pk", "state"))


def unknown_effect_id(task_id: str, step: str = STEP) -> int:
    from mcptasks.models import Effect, EffectState

    return Effect.objects.get(task_id=task_id, step=step, state=EffectState.UNKNOWN).pk


# ---------------------------------------------------------------- the kill
def kill_at_marks(
    cluster: Cluster,
    iterations: list[Iteration],
    timeout: float,
    on_kill: Callable[[Iteration], None] | None = None,
) -> None:
    """SIGKILL the pool process holding each iteration's effect at its mark, as it gets there
    (then call ``on_kill`` with it, if given).

    At the kill, records what the task and the downstream said (``at_kill``): the effect row,
    the calls the downstream had for the key, the task's state, and whose lease it was.
    """
    from mcptasks.models import Task

    waiting = {it.task_id: it for it in iterations if not it.killed_pid}
    deadline = time.monotonic() + timeout
    while waiting:
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out waiting for the kill marks of {len(waiting)} tasks "
                f"(e.g. {next(iter(waiting))})"
            )
        seen: set[tuple[str, str]] = set()
        for mark in cloud.marks():
            point = (mark["key"], mark["mark"])
            first = point not in seen
            seen.add(point)
            # By task and step, not by the key the runner should derive: the checks that
            # follow name a wrong key, a wait for a mark that never comes would not.
            task_id, _, rest = mark["key"].partition(":")
            it = waiting.get(task_id)
            if (
                it is None
                or not first
                or not rest.startswith(STEP)
                or mark["mark"] != HOLD_MARKS[it.scenario.hold]
            ):
                continue
            row = Task.objects.filter(pk=it.task_id).values("state", "lease_owner").get()
            it.at_kill = {
                "effect": effect_states([it.task_id]).get(it.task_id),
                "downstream_calls": cloud.calls_per_key().get(mark["key"], 0),
                "task": row["state"],
                "lease_pid": lease_pid(row["lease_owner"]),
                "pool_process": _is_pool_process(cluster, mark["pid"]),
            }
            os.kill(mark["pid"], signal.SIGKILL)
            it.killed_pid, it.killed_at = mark["pid"], time.monotonic()
            del waiting[task_id]
            if on_kill is not None:
                on_kill(it)
        time.sleep(0.02)


def _is_pool_process(cluster: Cluster, pid: int) -> bool:
    """Is ``pid`` a pool child of one of this cluster's workers (never a master, never beat)?"""
    worker = cluster.worker_of(pid)
    return worker is not None and worker.pid != pid


def wait_settled(iterations: list[Iteration], timeout: float) -> None:
    """Wait until each task reaches what its kill leads to; record how long after the kill.

    A task that ends anywhere else fails the wait at once, naming its state.
    """
    pending = {it.task_id: it for it in iterations if it.settled_s is None}
    deadline = time.monotonic() + timeout
    while pending:
        states = task_states(list(pending))
        now = time.monotonic()
        for task_id, state in states.items():
            it = pending[task_id]
            if state == it.scenario.settles_in:
                it.settled_s = now - it.killed_at
                del pending[task_id]
            elif state in ("completed", "failed", "cancelled"):
                raise AssertionError(f"{task_id} ({it.scenario.name}) ended {state}")
        if pending and now > deadline:
            raise AssertionError(
                f"{len(pending)} tasks did not settle within {timeout:.0f} s "
                f"of their kill: {task_states(list(pending))}"
            )
        time.sleep(0.05)


def decide(
    effect_id: int,
    actor: Any,
    decision: str,
    note: str,
    external_ref: str = "",
    timeout: float = 60.0,
) -> int:
    """Record an operator's decision; "not applied" is refused until the dead attempt's lease
    has run out for MCPTASKS_RECONCILE_MARGIN_S, so retry until then. Returns the refusals."""
    from mcptasks import lifecycle

    refused = 0
    deadline = time.monotonic() + timeout
    while True:
        try:
            lifecycle.task_reconcile_effect(
                effect_id=effect_id,
                actor=actor,
                decision=decision,
                note=note,
                external_ref=external_ref,
            )
            return refused
        except lifecycle.AttemptMayBeAlive:
            refused += 1
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def reconcile_truthfully(iterations: list[Iteration], actor: Any) -> None:
    """olga decides each unknown effect from what the downstream says, then tries once more."""
    from mcptasks import lifecycle, wire
    from mcptasks.models import Task

    applied = cloud.applied()
    for it in iterations:
        if it.scenario.idempotent:
            continue
        task = Task.objects.select_related("tenant").get(pk=it.task_id)
        it.wire_while_waiting = wire.detailed_task(task, [])
        effect_id = unknown_effect_id(it.task_id)
        truth = applied.get(it.key, {}).get("charge_id", "")
        reference = truth if it.scenario.decision == "applied" else ""
        decide(
            effect_id,
            actor,
            it.scenario.decision,
            f"checked the cloud console: {it.scenario.decision}",
            reference,
        )
        it.decided_at = time.monotonic()
        try:
            lifecycle.task_reconcile_effect(
                effect_id=effect_id, actor=actor, decision="fail", note="a second opinion"
            )
        except lifecycle.EffectNotUnknown:
            it.second_decision_refused = True
        else:
            it.second_decision_refused = False


def wait_completed(iterations: list[Iteration], timeout: float) -> None:
    """Wait until every task completed; record, for reconciled ones, decision → completed."""
    pending = {it.task_id: it for it in iterations}
    deadline = time.monotonic() + timeout
    while pending:
        states = task_states(list(pending))
        now = time.monotonic()
        for task_id, state in states.items():
            it = pending[task_id]
            if state == "completed":
                if it.decided_at:
                    it.completed_s = now - it.decided_at
                del pending[task_id]
            elif state in ("failed", "cancelled"):
                raise AssertionError(f"{task_id} ({it.scenario.name}) ended {state}")
        if pending and now > deadline:
            raise AssertionError(
                f"{len(pending)} tasks did not complete: {task_states(list(pending))}"
            )
        time.sleep(0.05)


def run(
    cluster: Cluster,
    tasks: EffectTasks,
    scenarios: list[Scenario],
    actor: Any,
    *,
    timeout: float,
    wave: int = len(SCENARIOS),
    progress: Callable[[list[Iteration]], None] | None = None,
) -> list[Iteration]:
    """Start, kill, settle, reconcile and complete one task per entry of ``scenarios``,
    ``wave`` tasks at a time: a few kills at once keep each recovery what a lone kill costs
    (two CPUs; the reaper's sweep waits in the same queue as the replays)."""
    iterations: list[Iteration] = []
    for first in range(0, len(scenarios), wave):
        batch = tasks.start(scenarios[first : first + wave])
        kill_at_marks(cluster, batch, timeout)
        wait_settled(batch, timeout)
        reconcile_truthfully(batch, actor)
        wait_completed(batch, timeout)
        iterations += batch
        if progress is not None:
            progress(iterations)
    return iterations


# ---------------------------------------------------------------- what must hold
def problems(iterations: list[Iteration]) -> list[str]:
    """Every way the iterations break the issue's promises, one line each (empty: none)."""
    from audit.models import AuditEvent
    from mcptasks.models import Effect, EffectState, Task

    task_ids = [it.task_id for it in iterations]
    rows = {
        row["id"]: row
        for row in Task.objects.filter(pk__in=task_ids).values("id", "state", "result", "error")
    }
    effects: dict[tuple[str, str], dict[str, Any]] = {
        (e["task_id"], e["step"]): dict(e)
        for e in Effect.objects.filter(task_id__in=task_ids).values(
            "task_id", "step", "state", "result", "external_ref", "reconciled_by__username"
        )
    }
    calls, applications, applied = (
        cloud.calls_per_key(),
        cloud.applications_per_key(),
        cloud.applied(),
    )
    trails: dict[str, list[tuple[str, dict[str, Any]]]] = {t: [] for t in task_ids}
    for task_id, action, data in (
        AuditEvent.objects.filter(task_id__in=task_ids)
        .order_by("chain", "seq")
        .values_list("task_id", "action", "data")
    ):
        trails[task_id].append((action, data))
    found: list[str] = []
    for it in iterations:
        name = f"{it.task_id} ({it.scenario.name})"
        found += [f"{name}: {line}" for line in kill_problems(it)]
        row = rows[it.task_id]
        if row["state"] != "completed":
            found.append(f"{name}: ended {row['state']} {row['error']}")
            continue
        content = (row["result"] or {}).get("structuredContent") or {}
        charge, receipt = effects.get((it.task_id, STEP)), effects.get((it.task_id, "receipt"))
        keys = {key for key in [*calls, *applied] if key.startswith(f"{it.task_id}:")}
        if keys != {it.key, f"{it.task_id}:receipt"}:
            found.append(f"{name}: the downstream saw keys {sorted(keys)}")
        for key in keys:
            if applications.get(key) != 1:
                found.append(f"{name}: {key} applied {applications.get(key, 0)} times")
        expected_calls = 2 if it.scenario.idempotent and it.scenario.hold == "after" else 1
        if calls.get(it.key) != expected_calls:
            found.append(
                f"{name}: the downstream got {calls.get(it.key)} calls of {it.key}, "
                f"expected {expected_calls}"
            )
        if receipt is None or receipt["state"] != EffectState.APPLIED:
            found.append(f"{name}: the step after it is {receipt and receipt['state']}")
        if it.scenario.idempotent or it.scenario.decision == "not_applied":
            expected_state, expected_result = EffectState.APPLIED, applied.get(it.key)
        else:
            expected_state = EffectState.RECONCILED_APPLIED
            expected_result = {
                "external_ref": applied.get(it.key, {}).get("charge_id", ""),
                "reconciled": True,
            }
        if charge is None or charge["state"] != expected_state:
            found.append(
                f"{name}: charge effect is {charge and charge['state']}, expected {expected_state}"
            )
        elif charge["result"] != expected_result or content.get("charge") != expected_result:
            found.append(
                f"{name}: charge recorded {charge['result']}, returned "
                f"{content.get('charge')}, expected {expected_result}"
            )
        found += [f"{name}: {line}" for line in _trail_problems(it, trails[it.task_id], charge)]
    return found


def kill_problems(it: Iteration) -> list[str]:
    """The kill landed where the iteration says: in the effect, between its two records."""
    at = it.at_kill
    found = []
    if at.get("effect") != "intended":
        found.append(f"at the kill the effect was {at.get('effect')}, not intended")
    if at.get("task") != "running" or at.get("lease_pid") != it.killed_pid:
        found.append(
            f"at the kill the task was {at.get('task')} leased to pid "
            f"{at.get('lease_pid')}, not running in pid {it.killed_pid}"
        )
    if not at.get("pool_process"):
        found.append(f"pid {it.killed_pid} is not a pool process of this test's workers")
    called = 1 if it.scenario.hold == "after" else 0
    if at.get("downstream_calls") != called:
        found.append(
            f"at the kill the downstream had {at.get('downstream_calls')} calls, expected {called}"
        )
    return found


def _trail_problems(
    it: Iteration, trail: list[tuple[str, dict[str, Any]]], charge: dict[str, Any] | None
) -> list[str]:
    actions = [action for action, _ in trail]
    found = []
    if actions.count("task.requeued") != 1:
        found.append(f"requeued {actions.count('task.requeued')} times, expected once")
    if actions.count("task.completed") != 1 or actions[-1] != "task.completed":
        found.append(f"audit trail ends {actions[-3:]}")
    unknown = [data for action, data in trail if action == "effect.unknown"]
    reconciled = [data for action, data in trail if action == "effect.reconciled"]
    if it.scenario.idempotent:
        if unknown or reconciled:
            found.append("an idempotent effect went to reconciliation")
        return found
    if [d.get("step") for d in unknown] != [STEP]:
        found.append(f"effect.unknown events {unknown}")
    if [(d.get("step"), d.get("decision")) for d in reconciled] != [(STEP, it.scenario.decision)]:
        found.append(f"effect.reconciled events {reconciled}")
    if charge is not None and charge["reconciled_by__username"] != RECONCILER:
        found.append(f"reconciled by {charge['reconciled_by__username']}")
    if it.second_decision_refused is not True:
        found.append("a second decision on the same effect was not refused")
    wire = it.wire_while_waiting
    if wire.get("status") != "working" or "operator" not in str(wire.get("statusMessage")):
        found.append(
            f"on the wire while waiting: {wire.get('status')} {wire.get('statusMessage')!r}"
        )
    return found


def summary(iterations: list[Iteration], wall_s: float) -> str:
    calls = cloud.calls_per_key()
    lines = []
    for scenario in SCENARIOS:
        its = [it for it in iterations if it.scenario == scenario]
        if not its:
            continue
        per_key = sorted({calls.get(it.key, 0) for it in its})
        line = (
            f"{scenario.name}: {len(its)} kills; kill -> "
            f"{scenario.settles_in}: {figures([it.settled_s or 0.0 for it in its])}; "
            f"downstream calls per key {per_key}"
        )
        if not scenario.idempotent:
            line += (
                f"; '{scenario.decision}' decision -> completed: "
                f"{figures([it.completed_s or 0.0 for it in its])}; second decisions "
                f"refused {sum(1 for it in its if it.second_decision_refused)}/{len(its)}"
            )
        lines.append(line)
    applications = cloud.applications_per_key()
    keys = [key for it in iterations for key in (it.key, f"{it.task_id}:receipt")]
    lines.append(
        f"keys applied exactly once: {sum(1 for k in keys if applications.get(k) == 1)}"
        f"/{len(keys)}; wall time {wall_s:.1f} s"
    )
    return "\n".join(lines)


def slowest(iterations: list[Iteration], count: int = 2) -> str:
    """The audit timelines of the slowest recoveries, in seconds from their kill."""
    from tests.faults.checks import task_timeline

    lines = []
    for it in sorted(iterations, key=lambda it: -(it.settled_s or 0.0))[:count]:
        killed_wall = time.time() - (time.monotonic() - it.killed_at)
        lines.append(
            f"{it.task_id} ({it.scenario.name}): settled {it.settled_s or 0.0:.2f} s after its kill"
        )
        lines += [
            f"    {at.timestamp() - killed_wall:+.2f} {action} {data.get('attempt', '')}"
            for at, action, data in task_timeline(it.task_id)
        ]
    return "\n".join(lines)
