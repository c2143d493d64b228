#!/usr/bin/env python
"""kill -9 a Celery worker around an effect, N times per case, and end tasks with an open effect
every way there is (issues 6 and 20), standalone.

The kill cases: an idempotent and a non-idempotent effect, each killed between ``intended`` and
the downstream call and between the downstream call and ``applied`` (tests/effects/crash.py).
The kill points are exact: the effect holds at a mark it writes into the fake downstream, and the
pool process that wrote it is SIGKILLed there. Idempotent effects must complete with every key
applied once downstream; non-idempotent ones must wait in needs_reconciliation until olga
reconciles them (truthfully: not_applied, or applied with the downstream's reference), then
complete; a second decision on an effect must be refused.

The ends (``--endings`` rounds, tests/effects/endings.py): a non-idempotent effect left open
before or after the downstream applied it, then the task cancelled during the crash, past the
attempt limit, past its TTL, force-cancelled, or failed by an input timeout. Each effect must
become unknown, reach olga's queue and the backlog metric, and take her truthful decision.

Creates a database of its own on the PostgreSQL server, migrates it, starts two worker
processes (four pool processes each) and beat against it and Redis database 2 (flushed), runs
the kills four at a time (one per case) and the ends ten at a time, prints the figures, and
exits non-zero if any iteration broke a promise or an audit chain, or dropped an effect.

    .venv/bin/python scripts/effect_crash_loop.py --iterations 50 --endings 10 \
        --redis redis://127.0.0.1:6396

tests/effects/test_crash.py and tests/effects/test_endings.py run the same iterations a few
times in CI. The set-up is shared with scripts/fault_kill_loop.py (tests/faults/standalone.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REDIS_DB = 2
TIMEOUT_S = 120.0


def parse_args() -> argparse.Namespace:
    from tests.faults import standalone

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=50, help="kills per case")
    parser.add_argument(
        "--endings", type=int, default=10, help="rounds of every end (10 tasks a round)"
    )
    standalone.add_arguments(parser, REDIS_DB)
    return parser.parse_args()


def main() -> int:
    sys.path.insert(0, str(REPO))
    from tests.faults import standalone

    args = parse_args()
    with standalone.standalone(args, "effectloop", REDIS_DB) as run:
        from django.contrib.auth import get_user_model

        from audit.record import Actor
        from tests.effects import crash, endings
        from tests.faults import checks, harness

        olga_user = get_user_model().objects.get(username="olga")
        olga = Actor.for_user(olga_user, kind="operator")
        tasks = crash.EffectTasks(run.cast)
        problems: list[str] = []
        started = time.monotonic()
        iterations: list[crash.Iteration] = []
        if args.iterations:
            cluster = run.cluster()
            crash.start_cluster(cluster)
            scenarios = [s for _ in range(args.iterations) for s in crash.SCENARIOS]

            def progress(done: list[crash.Iteration]) -> None:
                if len(done) % 40 == 0:
                    print(
                        f"{len(done)} kills, the last settled in {done[-1].settled_s or 0.0:.2f} s",
                        flush=True,
                    )

            iterations = crash.run(
                cluster, tasks, scenarios, olga, timeout=TIMEOUT_S, progress=progress
            )
            cluster.stop_all()
            problems += crash.problems(iterations)
        kill_wall_s = time.monotonic() - started
        ends: list[endings.Ending] = []
        if args.endings:
            started_ends = time.monotonic()
            cluster = run.cluster(**endings.WORKER_ENV)
            crash.start_cluster(cluster)
            ends, _ = endings.run(
                cluster, tasks, run.cast, olga, olga_user, rounds=args.endings, timeout=TIMEOUT_S
            )
            problems += endings.problems(ends)
            ends_wall_s = time.monotonic() - started_ends
        dropped = checks.dropped_effects(
            [it.task_id for it in iterations] + [e.task_id for e in ends]
        )
        gaps = checks.audit_gaps()
        if iterations:
            print(crash.summary(iterations, kill_wall_s))
            print(
                f"kill -> settled, all cases: "
                f"{checks.figures([it.settled_s or 0.0 for it in iterations])} "
                f"(bound {harness.SETTLE_S:.1f} s)"
            )
        if ends:
            print(endings.summary(ends) + f"; wall time {ends_wall_s:.1f} s")
        print(f"iterations that broke a promise: {len({p.split(' ')[0] for p in problems})}")
        print(f"dropped effects (left open on an ended task, or never audited): {len(dropped)}")
        print(f"audit chain problems (gaps, broken links): {len(gaps)}")
        for line in [*problems, *dropped, *gaps][:20]:
            print(f"  {line}")
        if iterations:
            print("slowest recoveries:\n" + crash.slowest(iterations))
        return 1 if problems or dropped or gaps else 0


if __name__ == "__main__":
    sys.exit(main())
