"""Every end of a task with an open non-idempotent effect sends it to reconciliation (issue 20),
in real worker processes: kill -9 inside the effect (before and after the downstream applied
it), then cancel, the attempt limit, TTL expiry or a force cancel — or an input timeout while
the effect waits on a question. tests/effects/endings.py says what must hold.

CI runs ``MCPTASKS_ENDING_ROUNDS`` rounds (default 2: 20 ends, 4 per path);
scripts/effect_crash_loop.py --endings N runs more standalone and prints the figures.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from tests.effects import crash, endings
from tests.faults import harness

pytestmark = [
    pytest.mark.live,
    pytest.mark.pg,
    pytest.mark.redis,
    pytest.mark.django_db(transaction=True),
]

ROUNDS = int(os.environ.get("MCPTASKS_ENDING_ROUNDS", "2"))
TIMEOUT_S = 120.0


def test_every_end_of_a_task_sends_its_open_effect_to_reconciliation(
    cluster: harness.Cluster,
    cast: dict[str, dict[str, Any]],
    olga_actor: Any,
    users: dict[str, Any],
    settings: Any,
) -> None:
    settings.MCPTASKS_RECONCILE_MARGIN_S = 1
    cluster.extra_env.update(endings.WORKER_ENV)
    crash.start_cluster(cluster)
    started = time.monotonic()
    ran, backlogs = endings.run(
        cluster,
        crash.EffectTasks(cast),
        cast,
        olga_actor,
        users["olga"],
        rounds=ROUNDS,
        timeout=TIMEOUT_S,
    )
    print("\n" + endings.summary(ran) + f"\nwall time {time.monotonic() - started:.1f} s")
    assert len(ran) == ROUNDS * len(endings.PATHS) * len(endings.HOLDS)
    assert endings.problems(ran) == []
    assert endings.dropped(ran) == 0
    assert min(backlogs) >= 2 * len(endings.PATHS)  # a wave's effects, all counted at once
    # "not applied" waited for the dead attempt's lease and the margin; "applied" did not.
    assert all(e.early_refusals == 0 for e in ran if e.decision == "applied")
