"""B7 the outbox: what task creation costs with and without a subscribed destination, and how
fast one worker thread sends webhooks to a local receiver.

    MCPTASKS_VAR_DIR=$(mktemp -d) .venv/bin/python bench/outbox.py [--tasks 300]

Runs in-process on the configured database (SQLite under the var dir when DATABASE_URL is
unset; give DATABASE_URL for PostgreSQL — the database is migrated and written to). Prints
medians of per-creation wall time; not part of `make bench` (no floor to compare with)."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcptasks.settings")
os.environ.setdefault("MCPTASKS_TOOL_PACKS", "mcptasks.tools.demo,tests.toolpack")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=300)
    args = parser.parse_args()
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    settings.MCPTASKS_EMBEDDED_WORKER = True
    settings.MCPTASKS_MAX_ACTIVE_TASKS_PER_PRINCIPAL = 10**9
    settings.MCPTASKS_MAX_ACTIVE_TASKS_PER_TENANT = 10**9
    from audit.record import Actor
    from mcptasks import embedded, lifecycle
    from mcptasks.management.commands.seed_demo import seed_cast
    from mcptasks.outbox import delivery, destinations, subscriptions
    from mcptasks.sinks.webhook import new_secret
    from tests.outbox.receiver import Receiver

    embedded.decline()
    cast = seed_cast()
    alice, amy = cast["alice"], cast["amy"]

    def create(count: int) -> list[float]:
        times = []
        for n in range(count):
            started = time.perf_counter()
            lifecycle.task_create(
                spec=lifecycle.NewTask(
                    tenant_id=alice["tenant"].pk,
                    principal_id=alice["user"].pk,
                    tool_name="echo_task",
                    arguments={"text": f"b{n}"},
                    policy_revision="bench",
                ),
                actor=Actor.for_user(alice["user"], kind="principal"),
            )
            times.append(time.perf_counter() - started)
        embedded.clear()
        return times

    create(20)  # warm up
    bare = create(args.tasks)
    # The hook lifecycle calls on every audited change, for a tenant without destinations.
    from mcptasks.models import Task

    task = Task.objects.select_related("tenant").filter(principal=alice["user"]).first()
    rounds = 100_000
    started = time.perf_counter()
    for _ in range(rounds):
        delivery.writer.task_event(task, "task.started", {})
    hook_us = (time.perf_counter() - started) / rounds * 1e6
    receiver = Receiver().start()
    destinations.create(
        tenant=amy["tenant"],
        actor=Actor.for_user(amy["user"]),
        created_by=amy["user"],
        name=f"bench-{time.time_ns()}",
        kind="webhook",
        config={"url": receiver.url},
        secret=new_secret(),
        events=["task.created"],
    )
    subscriptions.forget()
    subscribed = create(args.tasks)
    from mcptasks.models import Delivery, DeliveryState

    pending = list(
        Delivery.objects.filter(state=DeliveryState.PENDING).values_list("pk", flat=True)
    )
    started = time.perf_counter()
    for delivery_id in pending:
        delivery.deliver(delivery_id)
    elapsed = time.perf_counter() - started
    receiver.stop()
    print(f"database: {settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]}")
    print(f"task_create, no destination:        median {statistics.median(bare) * 1e3:.2f} ms")
    print(
        f"task_create, one subscribed webhook: median {statistics.median(subscribed) * 1e3:.2f} ms"
    )
    print(f"outbox hook, tenant without destinations: {hook_us:.2f} µs per change")
    print(f"webhook sends, one thread: {len(pending) / elapsed:.0f}/s ({len(pending)} sent)")


if __name__ == "__main__":
    main()
