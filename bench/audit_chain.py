"""Benchmark: the cost of the audit chain per transition, and how long a chain head stays locked.

    .venv/bin/python bench/audit_chain.py [--transitions 2000] [--writers 4]

On a throwaway PostgreSQL database (``BENCH_PG_SERVER``, dropped afterwards):

1. *Per-transition overhead*: the same task transition (a conditional UPDATE of the task row, as
   lifecycle applies it) committed with and without ``audit.record``; the difference is what the
   chain costs (redaction, RFC 8785, SHA-256, the head lock, one INSERT, one head UPDATE).
2. *Lock hold time*: from the moment ``SELECT … FOR UPDATE`` on the chain head returns to the
   moment the COMMIT returns — the span in which another writer of the same chain must wait —
   with one writer, then ``--writers`` threads on one busy tenant (lock waits included).
3. *Tenant independence*: the same threads spread over as many tenants, for comparison.
4. *Sealing after commit* (``MCPTASKS_AUDIT_SEAL_DELAY_MS`` > 0, the PostgreSQL default): the
   committed INSERT of an unsealed event, and what :func:`audit.seal.seal_chains` then spends
   per event (rounds of ``--seal-batch`` events).

Sections 1-3 seal inline (``MCPTASKS_AUDIT_SEAL_DELAY_MS`` = 0), as the tests do.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pg import dedicated_database, migrate, setup_django


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"mean {statistics.fmean(values) * 1000:.3f} ms, p50 "
        f"{statistics.median(values) * 1000:.3f} ms, p99 {p99 * 1000:.3f} ms"
    )


class HeadLockClock:
    """Notes when this thread's ``SELECT … FOR UPDATE`` of a chain head returned."""

    def __init__(self) -> None:
        self.local = threading.local()

    def __call__(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        started = time.perf_counter()
        result = execute(sql, params, many, context)
        # The head is locked by its read (FOR UPDATE) or, once this process knows it, by the
        # compare-and-set UPDATE that also inserts the event (audit/record.py).
        if "audit_chainhead" in sql and ("FOR UPDATE" in sql or sql.startswith("WITH head AS")):
            self.local.locked_at = time.perf_counter()
            self.local.lock_wait = self.local.locked_at - started
        return result


def make_tasks(count: int, tenant_slug: str) -> list[tuple[str, int, str]]:
    """``count`` queued tasks of ``tenant_slug``; (task id, tenant id, tenant slug) each."""
    from audit.record import Actor
    from mcptasks import lifecycle
    from mcptasks.management.commands.seed_demo import seed_cast
    from mcptasks.models import Tenant

    cast = seed_cast(with_tokens=False)
    tenant, _ = Tenant.objects.get_or_create(slug=tenant_slug, defaults={"name": tenant_slug})
    user = cast["alice"]["user"]
    tasks = []
    for _ in range(count):
        task, _created = lifecycle.task_create(
            spec=lifecycle.NewTask(
                tenant_id=tenant.pk,
                principal_id=user.pk,
                tool_name="echo_task",
                arguments={"text": "hi"},
                policy_revision="bench",
            ),
            actor=Actor.for_user(user, kind="principal"),
        )
        tasks.append((task.pk, tenant.pk, tenant.slug))
    return tasks


def transition(task: tuple[str, int, str], audited: bool, clock: HeadLockClock) -> float | None:
    """One committed transition; with ``audited``, return how long the head lock was held
    (and note in ``clock.local`` the part before the COMMIT and record()'s CPU time)."""
    from django.db import connection, transaction
    from django.db.models import F

    from audit.record import Actor, record
    from mcptasks.models import Task

    task_id, tenant_id, tenant_slug = task
    with connection.execute_wrapper(clock), transaction.atomic():
        Task.objects.filter(pk=task_id).update(version=F("version") + 1, status_message="x")
        if audited:
            cpu = time.thread_time()
            record(
                action="task.started",
                actor=Actor.system("bench"),
                tenant_id=tenant_id,
                tenant_slug=tenant_slug,
                task_id=task_id,
                data={"state": "running", "attempt": 1},
            )
            clock.local.record_cpu = time.thread_time() - cpu
            clock.local.before_commit = time.perf_counter() - clock.local.locked_at
    return time.perf_counter() - clock.local.locked_at if audited else None


def overhead(task: tuple[str, int, str], count: int) -> None:
    clock = HeadLockClock()
    for audited in (False, True):  # warm up both paths
        for _ in range(50):
            transition(task, audited, clock)
    timings: dict[bool, list[float]] = {False: [], True: []}
    holds: list[float] = []
    before_commit: list[float] = []
    record_cpu: list[float] = []
    for index in range(count * 2):
        audited = bool(index % 2)  # interleaved, so drift in load hits both alike
        started = time.perf_counter()
        hold = transition(task, audited, clock)
        timings[audited].append(time.perf_counter() - started)
        if hold is not None:
            holds.append(hold)
            before_commit.append(clock.local.before_commit)
            record_cpu.append(clock.local.record_cpu)
    plain, chained = timings[False], timings[True]
    print(f"transition without audit: {_ms(plain)}")
    print(f"transition with audit:    {_ms(chained)}")
    print(
        f"chain overhead per transition: "
        f"{(statistics.median(chained) - statistics.median(plain)) * 1000:.3f} ms (p50 "
        f"difference), {(statistics.fmean(chained) - statistics.fmean(plain)) * 1000:.3f} ms "
        f"(mean difference)"
    )
    print(f"audit.record CPU time (redact, RFC 8785, SHA-256, ORM): {_ms(record_cpu)}")
    print(
        f"head lock held, one writer: {_ms(holds)}; of which before COMMIT (INSERT + head "
        f"UPDATE): {_ms(before_commit)}"
    )


def concurrent(tasks: list[tuple[str, int, str]], writers: int, count: int, label: str) -> None:
    from django.db import connection

    clock = HeadLockClock()
    holds: list[float] = []
    waits: list[float] = []
    lock = threading.Lock()

    def work(task: tuple[str, int, str]) -> None:
        try:
            for _ in range(count):
                hold = transition(task, True, clock)
                with lock:
                    holds.append(hold or 0.0)
                    waits.append(clock.local.lock_wait)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(tasks[index],)) for index in range(writers)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    print(
        f"{label}: {writers * count / seconds:,.0f} audited transitions/s; head lock held "
        f"{_ms(holds)}; SELECT FOR UPDATE of the head took {_ms(waits)}"
    )


def sealing(tenant_slug: str, events: int, rounds: int) -> None:
    """Insert ``events`` unsealed events of one tenant (one committed transaction each), then
    seal them; ``rounds`` times."""
    from django.conf import settings
    from django.db import transaction

    from audit import seal
    from audit.chain import chain_for_tenant
    from audit.record import Actor, record
    from mcptasks.models import Tenant

    tenant = Tenant.objects.get(slug=tenant_slug)
    chain = chain_for_tenant(tenant_slug)
    settings.MCPTASKS_AUDIT_SEAL_DELAY_MS = 600_000  # unsealed; the bench seals, not a thread
    wake, seal.wake_after_commit = seal.wake_after_commit, lambda chain: None
    inserts: list[float] = []
    per_event: list[float] = []
    try:
        for _ in range(rounds):
            for index in range(events):
                started = time.perf_counter()
                with transaction.atomic():
                    record(
                        action="task.started",
                        actor=Actor.system("bench"),
                        tenant_id=tenant.pk,
                        tenant_slug=tenant_slug,
                        task_id=f"t{index}",
                        data={"state": "running", "attempt": 1},
                    )
                inserts.append(time.perf_counter() - started)
            started = time.perf_counter()
            sealed, _ = seal.seal_chains([chain])
            assert sealed == events, sealed
            per_event.append((time.perf_counter() - started) / sealed)
    finally:
        seal.wake_after_commit = wake
        settings.MCPTASKS_AUDIT_SEAL_DELAY_MS = 0
    print(f"unsealed event, committed INSERT: {_ms(inserts)}")
    print(
        f"seal, per event (rounds of {events}, batches of {seal.BATCH}): "
        f"{_ms(per_event)} over {rounds} rounds"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transitions", type=int, default=2000)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--seal-batch", type=int, default=500)
    parser.add_argument("--seal-rounds", type=int, default=8)
    args = parser.parse_args()
    with dedicated_database() as url:
        setup_django(url)
        migrate()
        from django.conf import settings

        settings.MCPTASKS_AUDIT_SEAL_DELAY_MS = 0  # sections 1-3 seal inline
        busy = make_tasks(args.writers, "busy")
        spread = [make_tasks(1, f"tenant{index}")[0] for index in range(args.writers)]
        overhead(busy[0], args.transitions)
        per_writer = max(1, args.transitions // args.writers)
        concurrent(busy, args.writers, per_writer, f"{args.writers} writers, one tenant")
        concurrent(
            spread, args.writers, per_writer, f"{args.writers} writers, {args.writers} tenants"
        )
        sealing(busy[0][2], args.seal_batch, args.seal_rounds)
        from audit.chain import verify_chains

        assert all(report.ok for report in verify_chains()), "chains must verify after the bench"
        from django.db import connections

        connections.close_all()


if __name__ == "__main__":
    main()
