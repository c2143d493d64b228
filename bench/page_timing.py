"""Benchmark: server time of the dashboard's pages on 100,000 tasks and 1,000,000 audit events.

    .venv/bin/python bench/page_timing.py [--tasks 100000] [--events 1000000] [--runs 15] [--keep]

Creates a throwaway PostgreSQL database on ``BENCH_PG_SERVER`` (default
postgres://postgres@127.0.0.1:5432), seeds it with ``bulk_create`` (tasks in every state, pending
approvals, unknown effects, overdue cancels, answered requests, effects, and ~10 audit events per
task on two tenant chains), runs ANALYZE, then times each page through Django's full request
cycle (middleware, session, access checks, queries, templates) with the test client: warm-ups,
then the median and p95 of ``--runs`` requests. Target: under 100 ms each. Results go to
bench/results/page_timing.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _pg import dedicated_database, migrate, setup_django

# Web processes use a connection pool in production (DATABASE_POOL defaults to true there).
os.environ.setdefault("DATABASE_POOL", "true")

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_MS = 100.0
BATCH = 5000
EVENTS_PER_TASK_ACTIONS = (
    "task.created",
    "task.started",
    "task.input_requested",
    "task.input_answered",
    "task.started",
    "task.sleeping",
    "task.woken",
    "task.started",
    "task.completed",
    "task.purged",
)
# Finished tasks dominate; running ones are bounded by the workers (the specials add 50).
STATE_WEIGHTS = (
    ("completed", 85),
    ("failed", 5),
    ("cancelled", 4),
    ("queued", 2),
    ("sleeping", 2),
    ("awaiting_input", 2),
)


# ---------------------------------------------------------------- seeding
def seed(task_count: int, event_count: int) -> dict[str, Any]:
    """Seed the database; return the ids the timings look at."""
    from audit.models import AuditEvent, ChainHead
    from mcptasks.management.commands.seed_demo import seed_cast
    from mcptasks.models import (
        Audience,
        Effect,
        InputRequest,
        Task,
        new_task_id,
    )
    from mcptasks.search import status_text, summary_text

    rng = random.Random(7)
    cast = seed_cast()
    acme, globex = cast["alice"]["tenant"], cast["bob"]["tenant"]
    owners = {
        acme.pk: [cast["alice"]["user"].pk, cast["adam"]["user"].pk],
        globex.pk: [cast["bob"]["user"].pk],
    }
    now = datetime.now(UTC)
    # The same 35 days and the same special rows whatever the task count, so each page shows
    # as many rows on 1,000 tasks as on 100,000 (B4 compares the cost of the table sizes).
    spacing = timedelta(days=35) / task_count
    start = now - spacing * task_count
    # Each task in its day's partition (PostgreSQL), as a server running those 35 days made them.
    from mcptasks import task_partitions

    if task_partitions.partitioned():
        have = {part.name for part in task_partitions.partitions()}
        day = start.date()
        while day <= now.date():
            if f"mcptasks_task_p{day:%Y%m%d}" not in have:
                task_partitions.attach_day(day)
            day += timedelta(days=1)
    states = [state for state, weight in STATE_WEIGHTS for _ in range(weight)]
    special = {
        "awaiting_operator": 200,
        "needs_reconciliation": 50,
        "cancel_stuck": 20,
        "running": 50,
        "failed": 100,  # a full page of failed tasks for the state filter at any size
        "checkout": 30,  # what the text search finds, as many at any size
    }
    special_at = {
        index: kind
        for kind, count in special.items()
        for index in rng.sample(range(max(0, task_count - 5000), task_count), count)
    }

    tasks: list[Task] = []
    task_rows: list[tuple[str, int, datetime, str]] = []
    inputs: list[InputRequest] = []
    effects: list[Effect] = []
    began = time.monotonic()
    for index in range(task_count):
        tenant_id = acme.pk if rng.random() < 0.7 else globex.pk
        principal_id = rng.choice(owners[tenant_id])
        created = start + spacing * index
        kind = special_at.get(index)
        state = {
            "awaiting_operator": "awaiting_operator",
            "needs_reconciliation": "needs_reconciliation",
            "running": "running",
            "cancel_stuck": "running",
            "failed": "failed",
        }.get(kind or "", rng.choice(states))
        task_id = new_task_id(created)
        terminal = state in ("completed", "failed", "cancelled")
        service = "checkout" if kind == "checkout" else f"svc-{index % 97}"
        arguments = {"service": service, "version": f"1.{index % 13}.0"}
        status = {"completed": "Completed", "failed": "Tool crashed"}.get(state, "Working")
        tasks.append(
            Task(
                id=task_id,
                tenant_id=tenant_id,
                principal_id=principal_id,
                tool_name=rng.choice(
                    ("deploy_service", "run_pipeline", "export_dataset", "cloud_job")
                ),
                arguments=arguments,
                search_summary=summary_text(arguments),
                search_status=status_text(status),
                argument_digest=f"{index:064x}",
                server_build="0.1.0+bench",
                policy_revision="p1",
                backend_job_id=f"job-{index}" if index % 4 == 0 else "",
                state=state,
                status_message=status,
                result={"content": [{"type": "text", "text": "ok"}]}
                if state == "completed"
                else None,
                error={"code": -32603, "message": "Tool crashed"} if state == "failed" else None,
                ttl_ms=86_400_000,
                created_at=created,
                updated_at=created + timedelta(seconds=20 if terminal else 1),
                expires_at=created + timedelta(days=1),
                attempt=1,
                version=5,
                cancel_requested_at=created + timedelta(seconds=1)
                if kind == "cancel_stuck"
                else None,
                cancel_reason="stop" if kind == "cancel_stuck" else "",
            )
        )
        task_rows.append((task_id, tenant_id, created, state))
        if kind == "awaiting_operator":
            inputs.append(
                InputRequest(
                    task_id=task_id,
                    tenant_id=tenant_id,
                    principal_id=principal_id,
                    key="approval",
                    method="elicitation/create",
                    audience=Audience.OPERATOR,
                    forbid_self_approval=True,
                    created_at=created,
                    params={
                        "message": f"Approve rollout {index}?",
                        "requestedSchema": {
                            "type": "object",
                            "properties": {"approve": {"type": "boolean"}},
                        },
                    },
                )
            )
        elif state == "completed" and index % 10 == 0:
            inputs.append(
                InputRequest(
                    task_id=task_id,
                    tenant_id=tenant_id,
                    principal_id=principal_id,
                    key="confirm",
                    method="elicitation/create",
                    audience=Audience.CLIENT,
                    state="answered",
                    params={"message": "Sure?"},
                    response={"action": "accept", "content": {}},
                    answered_via="mcp",
                    answered_at=created,
                    created_at=created,
                )
            )
        if kind == "needs_reconciliation":
            effects.append(
                Effect(
                    task_id=task_id,
                    tenant_id=tenant_id,
                    step="rollout",
                    idempotency_key=f"{task_id}:rollout",
                    state="unknown",
                    created_at=created,
                    updated_at=created,
                )
            )
        elif index % 5 == 0:
            effects.append(
                Effect(
                    task_id=task_id,
                    tenant_id=tenant_id,
                    step="build",
                    idempotency_key=f"{task_id}:build",
                    idempotent=True,
                    state="applied",
                    result={"ok": True},
                    created_at=created,
                    updated_at=created,
                )
            )
        if len(tasks) >= BATCH:
            Task.objects.bulk_create(tasks)
            tasks.clear()
    Task.objects.bulk_create(tasks)
    tasks.clear()
    InputRequest.objects.bulk_create(inputs, batch_size=BATCH)
    Effect.objects.bulk_create(effects, batch_size=BATCH)
    seeded_tasks = time.monotonic() - began

    began = time.monotonic()
    per_task = max(1, event_count // task_count)
    seqs = {acme.pk: 0, globex.pk: 0}
    slugs = {acme.pk: acme.slug, globex.pk: globex.slug}
    events: list[AuditEvent] = []
    written = 0
    for task_id, tenant_id, created, _state in task_rows:
        for number in range(per_task):
            if written >= event_count:
                break
            seqs[tenant_id] += 1
            action = EVENTS_PER_TASK_ACTIONS[number % len(EVENTS_PER_TASK_ACTIONS)]
            events.append(
                AuditEvent(
                    chain=f"tenant:{slugs[tenant_id]}",
                    seq=seqs[tenant_id],
                    created_at=created + timedelta(seconds=number * 2),
                    tenant_id=tenant_id,
                    actor_kind="system" if number else "principal",
                    actor_id="",
                    actor_display="worker" if number else "alice",
                    action=action,
                    task_id=task_id,
                    data={"state": "running", "attempt": 1},
                    prev_hash="0" * 64,
                    hash=f"{written:064x}",
                )
            )
            written += 1
        if len(events) >= BATCH:
            AuditEvent.objects.bulk_create(events)
            events.clear()
    AuditEvent.objects.bulk_create(events)
    for tenant_id, seq in seqs.items():
        ChainHead.objects.update_or_create(
            chain=f"tenant:{slugs[tenant_id]}", defaults={"seq": seq, "hash": "0" * 64}
        )
    seeded_events = time.monotonic() - began

    from django.db import connection

    with connection.cursor() as cursor:
        # Bulk inserts leave the search's trigram entries in GIN pending lists; a live database
        # has them merged by autovacuum, as here (each day partition's index of them).
        for index in ("task_search_summary_trgm", "task_search_status_trgm"):
            cursor.execute(
                "SELECT gin_clean_pending_list(relid) FROM pg_partition_tree(%s::regclass)"
                " WHERE isleaf",
                [index],
            )
        cursor.execute("ANALYZE")
    acme_tasks = [row for row in task_rows if row[1] == acme.pk]
    newest_acme = acme_tasks[-1][0]
    alice_task = (
        Task.objects.filter(principal=cast["alice"]["user"])
        .order_by("-created_at")
        .values_list("pk", flat=True)
        .first()
    )
    pending = InputRequest.objects.filter(state="pending").values_list("task_id", flat=True)
    return {
        "cast": cast,
        "newest_acme": newest_acme,
        "alice_task": alice_task,
        "approval_task": pending.first(),
        "job_id": "job-40000",
        "seconds": {"tasks": round(seeded_tasks, 1), "events": round(seeded_events, 1)},
        "counts": {
            "tasks": Task.objects.count(),
            "events": AuditEvent.objects.count(),
            "pending_inputs": InputRequest.objects.filter(state="pending").count(),
            "unknown_effects": Effect.objects.filter(state="unknown").count(),
        },
    }


@contextmanager
def _database(options: argparse.Namespace) -> Iterator[str]:
    if options.database:
        yield options.database
        return
    with dedicated_database(keep=options.keep) as url:
        yield url


def reseen() -> dict[str, Any]:
    """What :func:`seed` returns, read back from a database it seeded earlier."""
    from django.contrib.auth import get_user_model

    from audit.models import AuditEvent
    from mcptasks.models import Effect, InputRequest, Task, Tenant

    users = {user.username: {"user": user} for user in get_user_model().objects.all()}
    acme = Tenant.objects.get(slug="acme")
    return {
        "cast": users,
        "newest_acme": Task.objects.filter(tenant=acme)
        .order_by("-created_at")
        .values_list("pk", flat=True)
        .first(),
        "alice_task": Task.objects.filter(principal=users["alice"]["user"])
        .order_by("-created_at")
        .values_list("pk", flat=True)
        .first(),
        "approval_task": InputRequest.objects.filter(state="pending")
        .values_list("task_id", flat=True)
        .first(),
        "job_id": "job-40000",
        "seconds": {},
        "counts": {
            "tasks": Task.objects.count(),
            "events": AuditEvent.objects.count(),
            "pending_inputs": InputRequest.objects.filter(state="pending").count(),
            "unknown_effects": Effect.objects.filter(state="unknown").count(),
        },
    }


# ---------------------------------------------------------------- timing
def time_page(client: Any, url: str, runs: int) -> dict[str, Any]:
    from django.db import connection

    for _ in range(3):
        response = client.get(url, secure=True)
        assert response.status_code == 200, (url, response.status_code)
    query_ms: list[float] = []

    def timed(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        began = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            query_ms.append((time.perf_counter() - began) * 1000)

    with connection.execute_wrapper(timed):
        client.get(url, secure=True)
    samples, cpu = [], []
    for _ in range(runs):
        began, began_cpu = time.perf_counter(), time.process_time()
        response = client.get(url, secure=True)
        samples.append((time.perf_counter() - began) * 1000)
        cpu.append((time.process_time() - began_cpu) * 1000)
        assert response.status_code == 200
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(samples), 1),
        "p95_ms": round(ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))], 1),
        "cpu_ms": round(statistics.median(cpu), 1),
        "db_ms": round(sum(query_ms), 1),
        "queries": len(query_ms),
    }


def pages(seeded: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(user, label, url) of every page timed."""
    from mcptasks.queries import encode_cursor
    from mcptasks.task_ids import distinctive

    newest = seeded["newest_acme"]
    cursor = encode_cursor(datetime.now(UTC) - timedelta(days=10), "~~")  # after every id
    return [
        ("olga", "inbox", "/inbox/"),
        ("olga", "tasks list (acme, 70k)", "/tasks/"),
        ("olga", "tasks list, all tenants (100k)", "/tasks/?tenant="),
        ("olga", "tasks list, 10 days back", f"/tasks/?older={cursor}"),
        ("olga", "tasks list, state=failed", "/tasks/?state=failed"),
        ("olga", "tasks list, tool + principal", "/tasks/?tool=cloud_job&principal=adam"),
        # What the pages show of an id: the part after its day prefix.
        ("olga", "tasks search by id prefix", f"/tasks/?tenant=&q={distinctive(newest)[:10]}"),
        ("olga", "tasks search by job id", f"/tasks/?tenant=&q={seeded['job_id']}"),
        ("olga", "tasks search by text (checkout)", "/tasks/?tenant=&q=checkout"),
        ("olga", "tasks search by requester (adam)", "/tasks/?q=adam"),
        ("olga", "tasks search by status, sorted", "/tasks/?q=crashed&sort=-updated"),
        ("olga", "tasks list, outcome=failed", "/tasks/?outcome=failed"),
        ("olga", "task detail", f"/tasks/{newest}/"),
        ("olga", "task detail (approval)", f"/tasks/{seeded['approval_task']}/"),
        ("olga", "operations", "/operations"),
        ("olga", "audit list (acme)", "/audit/"),
        ("olga", "audit list, all chains (1M)", "/audit/?tenant=*"),
        ("olga", "audit list, action filter", "/audit/?tenant=acme&action=task.completed"),
        ("olga", "audit list, task filter", f"/audit/?tenant=*&task={newest}"),
        ("alice", "inbox (member)", "/inbox/"),
        ("alice", "tasks list (member, ~35k own)", "/tasks/"),
        ("alice", "task detail (owner)", f"/tasks/{seeded['alice_task']}/"),
        ("carl", "audit list (auditor, both tenants)", "/audit/?tenant=*"),
        ("carl", "tasks list (auditor)", "/tasks/"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--database", help="time an already seeded (--keep) database")
    parser.add_argument("--out", default="page_timing.json", help="results file in bench/results")
    options = parser.parse_args()
    with _database(options) as url:
        setup_django(url)
        migrate()
        from django.conf import settings
        from django.test import Client

        settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
        if options.database:
            seeded = reseen()
        else:
            print(
                f"seeding {options.tasks:,} tasks and {options.events:,} audit events …", flush=True
            )
            seeded = seed(options.tasks, options.events)
        print(f"seeded in {seeded['seconds']} s: {seeded['counts']}", flush=True)
        clients: dict[str, Client] = {}
        results = []
        for user, label, page_url in pages(seeded):
            if user not in clients:
                clients[user] = Client()
                clients[user].force_login(seeded["cast"][user]["user"])
            figures = time_page(clients[user], page_url, options.runs)
            results.append({"user": user, "page": label, "url": page_url, **figures})
            mark = "ok" if figures["median_ms"] < TARGET_MS else "SLOW"
            print(
                f"{mark:4} {user:6} {label:38} median {figures['median_ms']:6.1f} ms  "
                f"p95 {figures['p95_ms']:6.1f} ms  cpu {figures['cpu_ms']:5.1f} ms  "
                f"db {figures['db_ms']:5.1f} ms  {figures['queries']:2} queries",
                flush=True,
            )
    import subprocess

    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"machine: {load}")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / options.out
    out.write_text(
        json.dumps(
            {
                "machine": load,
                "tasks": options.tasks,
                "events": options.events,
                "runs": options.runs,
                "target_ms": TARGET_MS,
                "seed_seconds": seeded["seconds"],
                "counts": seeded["counts"],
                "pages": results,
            },
            indent=2,
        )
    )
    print(f"results: {out}")
    slow = [r for r in results if r["median_ms"] >= TARGET_MS]
    sys.exit(1 if slow else 0)


if __name__ == "__main__":
    main()
