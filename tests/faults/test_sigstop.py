"""SIGSTOP a worker past its lease, then SIGCONT (issue 5): the stale attempt's writes are all
refused, and the attempt that took over finishes the task."""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest

from tests.faults import checks, harness
from tests.faults.harness import LEASE_S, SWEEP_S, wait_for

pytestmark = [
    pytest.mark.live,
    pytest.mark.pg,
    pytest.mark.redis,
    pytest.mark.django_db(transaction=True),
]

STEPS = 3
SLOW_STEP = 2
# Long enough that the new attempt is still inside the slow step when the stale one resumes.
SLOW_S = 2 * LEASE_S


def _calls(conn: Any, key: str) -> list[tuple[int, int]]:
    return conn.execute(
        "SELECT pid, attempt FROM fault_downstream_call WHERE key = %s ORDER BY id", (key,)
    ).fetchall()


def test_stale_attempt_after_sigcont_writes_nothing_and_new_attempt_finishes(
    cluster: harness.Cluster, fault_tasks: harness.FaultTasks, write_log: Any
) -> None:
    from mcptasks.models import Task

    workers = cluster.start_workers("A", "B")
    cluster.start_beat()
    started = time.monotonic()
    task_id = fault_tasks.create(
        steps=STEPS, sleep_s=0, work_s=0.05, slow_step=SLOW_STEP, slow_s=SLOW_S
    )
    key = f"{task_id}:step-{SLOW_STEP}"

    # Stop the whole worker (master and pool child) inside the slow downstream call.
    pid, stale_attempt = wait_for(lambda: _calls(write_log, key), 60, "the slow step")[0]
    stopped = cluster.worker_of(pid)
    assert stopped is not None
    other = next(w for w in workers if w is not stopped)
    app_name = f"{harness.WORKER_APP_PREFIX}{stopped.name.split('#')[0]}"
    stale_backends = checks.backends_of(write_log, app_name)
    assert stale_backends, "the stopped worker holds no database connection"
    stopped.signal_all(signal.SIGSTOP)
    stopped_at, stopped_wall = time.monotonic(), time.time()

    # The reaper requeues the task once the lease runs out; the other worker claims it and
    # reaches the slow step again (the effect was intended, never confirmed: idempotent re-run).
    def taken_over() -> bool:
        return any(p != pid and attempt > stale_attempt for p, attempt in _calls(write_log, key))

    try:
        wait_for(taken_over, LEASE_S + SWEEP_S + 15, "another worker to take the task over")
    except AssertionError as exc:
        raise AssertionError(f"{exc}:\n{checks.diagnosis(task_id, stopped_wall)}") from None
    takeover_s = time.monotonic() - stopped_at
    new_attempt = Task.objects.values_list("attempt", flat=True).get(pk=task_id)
    assert other.owns(_calls(write_log, key)[-1][0])
    # The line between the attempt's own writes and stale ones: the stopped worker can write
    # nothing from here until SIGCONT. (Read before SIGSTOP, it also counted a write the attempt
    # sent in the instant before the signal landed, while it still held its lease.)
    (resume_clock,) = write_log.execute("SELECT clock_timestamp()").fetchone()
    stopped.signal_all(signal.SIGCONT)
    resumed_at = time.monotonic()

    wait_for(lambda: checks.all_terminal([task_id]), SLOW_S + 20, "the new attempt to finish")
    finished_s = time.monotonic() - resumed_at
    # Give the resumed attempt time to try every write it had left, then count.
    wait_for(
        lambda: "attempt stopped" in stopped.log() or harness.STALE_WARNING in stopped.log(),
        20,
        "the stale attempt to notice it was fenced off",
    )
    time.sleep(1)

    def stale_writes(after: bool) -> list[tuple[str, str, str]]:
        return write_log.execute(
            "SELECT tbl, op, task_id FROM fault_write_log WHERE backend = ANY(%s) "
            f"AND at {'>' if after else '<='} %s",
            (stale_backends, resume_clock),
        ).fetchall()

    accepted = stale_writes(after=True)
    refused = stopped.log().count(harness.STALE_WARNING)
    row = checks.task_rows([task_id])[task_id]
    problems = checks.outcome_problems([task_id], write_log, steps=STEPS, sleeps=False)
    problems += checks.audit_gaps()
    print(
        f"\nstale attempt {stale_attempt} stopped {takeover_s:.1f} s before attempt "
        f"{new_attempt} took over; after SIGCONT: {len(accepted)} stale writes accepted, "
        f"{refused} refused (fenced-off log lines); new attempt finished "
        f"{finished_s:.1f} s after SIGCONT; wall {time.monotonic() - started:.1f} s; "
        f"timeline from SIGSTOP:\n{checks.diagnosis(task_id, stopped_wall)}"
    )
    # The log does attribute writes to these backends: the attempt wrote before it stopped.
    assert stale_writes(after=False)
    assert accepted == []
    assert refused >= 1
    assert row["state"] == "completed" and row["attempt"] == new_attempt > stale_attempt
    assert problems == []
