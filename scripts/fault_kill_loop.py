#!/usr/bin/env python
"""kill -9 a Celery worker at random points of a multi-step tool, N times (issues 5 and 20),
standalone.

Creates a database of its own on the PostgreSQL server, migrates it, starts two worker processes
and beat against it and Redis database 15 (flushed), then, N times: starts a ``fault_steps``
task (five idempotent effects with durable sleeps between), kills -9 the worker running it at a
random moment (its pool child, or the whole worker, which is then restarted; with `--pool solo`
the whole worker every time) and — for
``--cancel-share`` of the kills — cancels the task right after, as a client giving up would; then
waits for the task to end. Prints the figures and exits non-zero if any task missed the bound
(lease + sweep + 10 s after its kill), lost a recorded step outcome, a cancelled one did not end
cancelled, an effect was left open on a task that ended (dropped), or the audit trail has a gap.

    .venv/bin/python scripts/fault_kill_loop.py --iterations 100 --redis redis://127.0.0.1:6396

tests/faults/test_kill.py runs the same iteration a few times in CI. The set-up is shared with
scripts/effect_crash_loop.py (tests/faults/standalone.py).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BROKER_DB = 15


def parse_args() -> argparse.Namespace:
    from tests.faults import standalone

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--cancel-share", type=float, default=0.3, help="kills then cancelled")
    parser.add_argument("--seed", default="5")
    parser.add_argument(
        "--pool",
        choices=("prefork", "solo"),
        default="prefork",
        help="the two workers' Celery pool (prefork: a kill takes the pool child or the worker)",
    )
    standalone.add_arguments(parser, BROKER_DB)
    return parser.parse_args()


def main() -> int:
    sys.path.insert(0, str(REPO))
    from tests.faults import standalone

    args = parse_args()
    with standalone.standalone(args, "faultloop", BROKER_DB) as run:
        import psycopg

        from tests.faults import checks, downstream, harness, kill_loop

        conn = psycopg.connect(downstream.conninfo(), autocommit=True)
        downstream.install(conn)
        cluster = run.cluster()
        cluster.start_workers("A", "B", pool=args.pool)
        cluster.start_beat()
        tasks = harness.FaultTasks(run.cast)
        rng = random.Random(args.seed)
        started = time.monotonic()
        records: list[kill_loop.KillRecord] = []
        missed = failures = 0
        while len(records) < args.iterations:
            try:
                record = kill_loop.run_iteration(cluster, tasks, rng, args.cancel_share)
            except AssertionError as exc:
                failures += 1
                print(f"iteration {len(records) + 1}: {exc}", flush=True)
                continue
            if record is None:
                missed += 1
                continue
            records.append(record)
            if len(records) % 10 == 0:
                print(f"{len(records)} kills, last settled in {record.settle_s:.2f} s", flush=True)
        unsealed = checks.unsealed_audit_events()
        gaps = checks.audit_gaps()  # seals what is left first, as a reader would wait for it
        kill_loop.count_calls(conn, records)
        problems = kill_loop.problems(records, conn)  # reads the trails in sequence order
        dropped = checks.dropped_effects([r.task_id for r in records])
        stale = sum(cluster.stale_warnings().values())
        print(kill_loop.summary(records, missed, stale, time.monotonic() - started))
        print(f"iterations that failed a bound: {failures}")
        print(
            f"tasks with a lost or inconsistent outcome: {len({p.split(':')[0] for p in problems})}"
        )
        print(f"dropped effects (left open on an ended task): {len(dropped)}")
        print(f"audit chain problems (gaps, broken links): {len(gaps)}")
        print(
            f"audit events still unsealed at the check (sealed by it): {unsealed[0]}, "
            f"of which older than the seal bound: {unsealed[1]}"
        )
        for line in [*problems, *gaps][:20]:
            print(f"  {line}")
        print("slowest kills:\n" + kill_loop.slowest(records))
        conn.close()
        downstream.close()
        return 1 if failures or problems or gaps or unsealed[1] else 0


if __name__ == "__main__":
    sys.exit(main())
