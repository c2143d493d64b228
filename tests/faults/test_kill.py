"""kill -9 of a worker at random points of a multi-step tool (issue 5).

CI runs ``MCPTASKS_FAULT_KILLS`` iterations (default 10) with prefork workers and half as many
with solo ones (the production default); scripts/fault_kill_loop.py runs the
full 100 standalone and prints the figures.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

import pytest

from tests.faults import checks, harness, kill_loop

pytestmark = [
    pytest.mark.live,
    pytest.mark.pg,
    pytest.mark.redis,
    pytest.mark.django_db(transaction=True),
]

KILLS = int(os.environ.get("MCPTASKS_FAULT_KILLS", "10"))
# Share of the kills followed at once by tasks/cancel (issue 20: cancel during a crash).
CANCEL_SHARE = float(os.environ.get("MCPTASKS_FAULT_CANCEL_SHARE", "0.3"))


@pytest.mark.parametrize(
    ("pool", "kills"),
    [
        pytest.param("prefork", KILLS, id="prefork"),
        # the production default (docs/operations.md "Worker processes"): every kill takes a
        # whole worker down, which boots again afterwards, so half as many
        pytest.param("solo", max(KILLS // 2, 1), id="solo"),
    ],
)
def test_killed_workers_lose_no_step_and_every_task_ends(
    cluster: harness.Cluster,
    fault_tasks: harness.FaultTasks,
    fault_db: Any,
    pool: str,
    kills: int,
) -> None:
    cluster.start_workers("A", "B", pool=pool)
    cluster.start_beat()
    rng = random.Random(os.environ.get("MCPTASKS_FAULT_SEED", "5"))
    started = time.monotonic()
    records: list[kill_loop.KillRecord] = []
    missed = 0
    while len(records) < kills:
        assert missed <= kills, "the tool keeps finishing before its kill moment"
        record = kill_loop.run_iteration(cluster, fault_tasks, rng, CANCEL_SHARE)
        if record is None:
            missed += 1
        else:
            records.append(record)
    kill_loop.count_calls(fault_db, records)

    problems = kill_loop.problems(records, fault_db)
    problems += checks.audit_gaps()
    stale = sum(cluster.stale_warnings().values())
    print("\n" + kill_loop.summary(records, missed, stale, time.monotonic() - started))
    print(kill_loop.slowest(records))
    assert problems == []
    assert max(r.settle_s for r in records) <= harness.SETTLE_S
    # At least one kill cost a running attempt, or this test proved nothing about reaping.
    assert any(r.requeues for r in records)
    assert any(r.cancelled for r in records) or CANCEL_SHARE == 0
