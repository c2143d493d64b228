"""One iteration of the kill -9 fault, shared by tests/faults/test_kill.py and
scripts/fault_kill_loop.py: start a multi-step task, kill -9 the worker running it at a random
moment, and measure how long the task takes to end after the kill. A share of the iterations
(``cancel_share``) also cancels the task right after the kill, as a client giving up would: it
must end ``cancelled``, and an effect the kill left open must go to reconciliation (issue 20)."""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass
from typing import Any

from tests.faults import checks
from tests.faults.harness import SETTLE_S, Cluster, FaultTasks, wait_for

# Five idempotent effects with four durable sleeps between them: about 2–3 s of work spread over
# five claims, so a kill lands in an effect, in a sleep's bookkeeping, in a claim or in a wake.
STEPS = 5
TOOL_ARGUMENTS: dict[str, Any] = {"steps": STEPS, "sleep_s": 0.1, "work_s": 0.1}
KILL_WINDOW_S = 1.5
# Share of kills that take the whole worker (master and pool) down instead of its pool child;
# a solo worker is one process, so each of its kills takes it down.
WORKER_KILL_SHARE = 0.3


@dataclass
class KillRecord:
    task_id: str
    mode: str  # "child": the pool process running the task; "worker": master and pool (or solo)
    cancelled: bool  # tasks/cancel sent right after the kill
    delay_s: float  # after the task first ran
    state_at_kill: str  # what the task row said at the kill (running, or about to suspend)
    settle_s: float  # kill → terminal
    attempts: int
    downstream_calls: int
    requeues: int
    timeline: list[str]  # the task's audit events, seconds from the kill


def run_iteration(
    cluster: Cluster, tasks: FaultTasks, rng: random.Random, cancel_share: float = 0.0
) -> KillRecord | None:
    """Kill the worker of one new task at a random moment (and cancel it, ``cancel_share`` of
    the time); None if the task finished first."""
    from audit.record import Actor
    from mcptasks import lifecycle
    from mcptasks.models import Task

    task_id = tasks.create(**TOOL_ARGUMENTS)
    wait_for(
        lambda: checks.states([task_id]).get(task_id) != "queued",
        60,
        f"task {task_id} to be claimed",
    )
    delay = rng.uniform(0, KILL_WINDOW_S)
    time.sleep(delay)

    def running_pid() -> tuple[int, str] | str | None:
        row = Task.objects.filter(pk=task_id).values("state", "lease_owner").first()
        assert row is not None
        if row["state"] in ("completed", "failed", "cancelled"):
            return "finished"
        pid = checks.lease_pid(row["lease_owner"]) if row["state"] == "running" else None
        return (pid, row["state"]) if pid else None

    found = wait_for(running_pid, 30, f"task {task_id} to run again", interval=0.01)
    if found == "finished":
        return None
    assert isinstance(found, tuple)
    pid, state = found
    worker = cluster.worker_of(pid)
    assert worker is not None, f"pid {pid} of task {task_id} is none of this test's workers"
    whole = rng.random() < WORKER_KILL_SHARE
    mode = "worker" if whole or worker.pool == "solo" else "child"
    if mode == "child":
        os.kill(pid, signal.SIGKILL)
    else:
        worker.signal_all(signal.SIGKILL)
    killed_at = time.monotonic()
    killed_wall = time.time()
    cancelled = rng.random() < cancel_share
    if cancelled:
        owner = Task.objects.select_related("principal").get(pk=task_id).principal
        answer = lifecycle.task_request_cancel(
            task_id=task_id, actor=Actor.for_user(owner, kind="principal"), reason="gave up"
        )
        # The run can finish between reading its lease and the kill: then the task was already
        # terminal, no intent was recorded (an idempotent no-op), and it is held to the promise
        # of a task that was not cancelled (every step outcome kept).
        cancelled = answer.task.cancel_requested_at is not None
    try:
        wait_for(
            lambda: checks.all_terminal([task_id]),
            SETTLE_S,
            f"task {task_id} to end within lease + sweep + 10 s of the kill",
            interval=0.05,
        )
    except AssertionError as exc:
        raise AssertionError(
            f"{exc} ({mode} kill at {delay:.2f} s, {state}):\n"
            + checks.diagnosis(task_id, killed_wall)
        ) from None
    finally:
        settle = time.monotonic() - killed_at
        if mode == "worker":
            # Restarted once the task ended: a booting worker would take one of the two CPUs
            # from the survivor doing the recovery being timed.
            worker.popen.wait(timeout=10)
            cluster.start_worker(worker.name.split("#")[0], pool=worker.pool)
    row = checks.task_rows([task_id])[task_id]
    trail = checks.task_audit([task_id])[task_id]
    timeline = [
        f"{at.timestamp() - killed_wall:+.2f} {action} {data.get('attempt', '')}"
        for at, action, data in checks.task_timeline(task_id)
    ]
    return KillRecord(
        task_id=task_id,
        mode=mode,
        cancelled=cancelled,
        delay_s=delay,
        state_at_kill=state,
        settle_s=settle,
        attempts=row["attempt"],
        downstream_calls=0,
        requeues=sum(1 for action, _ in trail if action == "task.requeued"),
        timeline=timeline,
    )


def count_calls(conn: Any, records: list[KillRecord]) -> None:
    from tests.faults import downstream

    calls = downstream.calls_per_key(conn, [r.task_id for r in records])
    for record in records:
        record.downstream_calls = sum(
            n for key, n in calls.items() if key.startswith(record.task_id + ":")
        )


def problems(records: list[KillRecord], conn: Any) -> list[str]:
    """What the iterations broke: a completed task lost a step outcome, a cancelled one did not
    end cancelled, or an effect was left open (dropped) on a task that ended."""
    kept = [r.task_id for r in records if not r.cancelled]
    found = checks.outcome_problems(kept, conn, steps=STEPS, sleeps=True)
    states = checks.states([r.task_id for r in records if r.cancelled])
    found += [
        f"{task_id}: cancelled after its kill, ended {state}"
        for task_id, state in states.items()
        if state != "cancelled"
    ]
    return found + checks.dropped_effects([r.task_id for r in records])


def summary(records: list[KillRecord], missed: int, stale: int, wall_s: float) -> str:
    steps = STEPS
    modes = {m: sum(1 for r in records if r.mode == m) for m in ("child", "worker")}
    finished = [r for r in records if not r.cancelled]
    reruns = sum(r.downstream_calls - steps for r in finished)
    hit = sum(1 for r in records if r.requeues)
    attempts: dict[int, int] = {}
    for r in records:
        attempts[r.attempts] = attempts.get(r.attempts, 0) + 1
    return "\n".join(
        [
            f"kills: {len(records)} ({modes['child']} pool child, {modes['worker']} whole worker); "
            f"{missed} tasks finished before their kill moment",
            f"cancelled right after the kill: {len(records) - len(finished)}; their effects "
            f"sent to reconciliation: {checks.unknown_effects([r.task_id for r in records])}",
            f"kills that cost a running attempt (lease reaped): {hit}",
            f"kill -> terminal: {checks.figures([r.settle_s for r in records])} "
            f"(bound {SETTLE_S:.1f} s)",
            f"claims per task: {dict(sorted(attempts.items()))} (5 without a kill or cancel)",
            f"downstream calls beyond one per step (idempotent re-runs): {reruns}",
            f"stale-attempt writes refused (log lines): {stale}",
            f"wall time: {wall_s:.1f} s",
        ]
    )


def slowest(records: list[KillRecord], count: int = 3) -> str:
    lines = []
    for record in sorted(records, key=lambda r: -r.settle_s)[:count]:
        lines.append(
            f"{record.task_id} {record.mode} kill at {record.delay_s:.2f} s "
            f"({record.state_at_kill}), terminal after {record.settle_s:.2f} s:"
        )
        lines += [f"    {entry}" for entry in record.timeline]
    return "\n".join(lines)
