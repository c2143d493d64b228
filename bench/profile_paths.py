"""Profile of issue 23's two paths, without changing product code: creation (one ``tools/call``
→ ``CreateTaskResult`` through the ASGI application, in process) and a no-op task's worker path
(``mcptasks.jobs.run_task``: claim, run, complete, with their audit events).

    .venv/bin/python bench/profile_paths.py [--count 300] [--spy]

A throwaway PostgreSQL database and a private ``redis-server``. Per task: CPU ms of this process
(every thread), SQL statements (by kind and text) and transactions sent by psycopg, Redis round
trips. ``--spy`` reruns each phase under the locked ``py-spy`` and prints the functions with the
most samples (self and inclusive). JSON in ``bench/results/profile_paths.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import BIN, RESULTS, bench_database, private_redis
from bench.end_to_end import server_env
from bench.peer_client import Peer

COUNTS: Counter[str] = Counter()
STATEMENTS: Counter[str] = Counter()
LOCK = threading.Lock()


def count(kind: str, sql: str | None = None) -> None:
    with LOCK:
        COUNTS[kind] += 1
        if sql is not None:
            STATEMENTS[" ".join(sql.split())[:110]] += 1


def instrument() -> None:
    """Count what psycopg and redis-py send, in every thread (class-level wrappers)."""
    import psycopg
    import redis.asyncio.connection
    import redis.connection

    def wrap(cls: Any, name: str, kind: str, text: bool = False) -> None:
        original = getattr(cls, name)

        def sync(self: Any, *args: Any, **kwargs: Any) -> Any:
            sql = args[0] if args else kwargs.get("query", "")
            count(kind, str(sql) if text else None)
            return original(self, *args, **kwargs)

        async def asynchronous(self: Any, *args: Any, **kwargs: Any) -> Any:
            sql = args[0] if args else kwargs.get("query", "")
            count(kind, str(sql) if text else None)
            return await original(self, *args, **kwargs)

        setattr(cls, name, asynchronous if asyncio.iscoroutinefunction(original) else sync)

    wrap(psycopg.Cursor, "execute", "sql", text=True)
    wrap(psycopg.Cursor, "executemany", "sql", text=True)
    wrap(psycopg.AsyncCursor, "execute", "sql", text=True)
    wrap(psycopg.Connection, "commit", "commit")
    wrap(psycopg.Connection, "rollback", "rollback")
    wrap(psycopg.AsyncConnection, "commit", "commit")
    wrap(redis.connection.Connection, "send_packed_command", "redis")  # Celery's broker
    wrap(redis.asyncio.connection.AbstractConnection, "send_packed_command", "redis_async")


async def asgi_post(app: Any, peer: Peer, body: bytes, method: str) -> dict[str, Any]:
    """One POST through the ASGI application; the JSON-RPC result."""
    headers = [(k.lower().encode(), v.encode()) for k, v in peer.headers(method).items()]
    headers += [(b"host", b"127.0.0.1"), (b"content-length", str(len(body)).encode())]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    sent = [False]
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        if sent[0]:
            await asyncio.sleep(3600)
        sent[0] = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return json.loads(b"".join(chunks))["result"]  # type: ignore[no-any-return]


def per_task(n: int, work: Any) -> dict[str, Any]:
    COUNTS.clear()
    STATEMENTS.clear()
    cpu, wall = time.process_time(), time.perf_counter()
    work()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {
        "cpu_ms": 1000 * cpu / n,
        "wall_ms": 1000 * wall / n,
        "statements": COUNTS["sql"] / n,
        "commits": COUNTS["commit"] / n,
        "rollbacks": COUNTS["rollback"] / n,
        "redis_round_trips": COUNTS["redis"] / n,
        "redis_async_round_trips": COUNTS["redis_async"] / n,  # the channel layer's
        "by_statement": {sql: c / n for sql, c in STATEMENTS.most_common(40)},
    }


def profile(n: int, phase: str, token: str) -> dict[str, Any]:
    from mcptasks import jobs
    from mcptasks.asgi import application

    peer = Peer("inproc", "http://127.0.0.1/mcp", token)

    async def create(k: int) -> list[str]:
        return [
            (await asgi_post(application, peer, peer.call_body(), "tools/call"))["taskId"]
            for _ in range(k)
        ]

    def run(ids: list[str]) -> None:
        for task_id in ids:
            jobs.run_task(task_id)

    run(asyncio.run(create(20)))  # warm-up: imports, pools, caches
    out: dict[str, Any] = {}
    if phase in ("all", "create"):
        ids: list[str] = []
        out["create"] = per_task(n, lambda: ids.extend(asyncio.run(create(n))))
    else:
        ids = asyncio.run(create(n))
    if phase in ("all", "worker"):
        out["worker"] = per_task(n, lambda: run(ids))
    return out


SETUP_FRAMES = ("seed (", "_find_and_load", "django/__init__.py", "bench_database (")


def spy_top(
    raw: Path, require: str | None = None, limit: int = 25
) -> dict[str, list[tuple[str, float]]]:
    """Self and inclusive sample shares of the functions in a py-spy raw (collapsed) file
    (``--gil``: the thread holding the GIL, so on-CPU Python time), setup excluded; with
    ``require``, only the stacks through that frame."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        if any(skip in stack for skip in SETUP_FRAMES) or (require and require not in stack):
            continue
        frames = stack.split(";")
        n = int(samples)
        total += n
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    return {
        "self": [(f, c / total) for f, c in own.most_common(limit)],
        "inclusive": [(f, c / total) for f, c in inclusive.most_common(limit * 2)],
    }


def quiesce() -> None:
    """Let the audit sealer end its round, then close every connection and Django's pool: the
    database is dropped next, and a sealer or pool still on it would log errors."""
    from django.conf import settings
    from django.db import connections

    time.sleep(settings.MCPTASKS_AUDIT_SEAL_DELAY_MS / 1000 + 1)
    for connection in connections.all():
        connection.close()
        if hasattr(connection, "close_pool"):
            connection.close_pool()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--phase", choices=["all", "create", "worker"], default="all")
    parser.add_argument("--spy", action="store_true")
    parser.add_argument("--out", default="profile_paths.json")
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        stack.enter_context(private_redis())
        url = stack.enter_context(bench_database(f"mcptasks_bench_profile_{os.getpid()}"))
        from bench.peers import seed

        token = seed(url)
        os.environ.update(server_env(url))
        instrument()
        results = profile(args.count, args.phase, token)
        quiesce()
    if args.spy:
        for phase in ("create", "worker"):
            raw = RESULTS / f"profile_{phase}.spy.txt"
            subprocess.run(
                [
                    *(str(BIN / "py-spy"), "record", "--gil", "-r", "400", "-f", "raw"),
                    *("-o", str(raw)),
                    *("--", sys.executable, __file__, "--phase", phase),
                    *("--count", str(args.count), "--out", f"profile_{phase}_spied.json"),
                ],
                check=True,
                capture_output=True,
            )
            # the worker phase creates its tasks first, in the server's threads: not counted
            results[f"spy_{phase}"] = spy_top(raw, "per_task (" if phase == "worker" else None)
    (RESULTS / args.out).write_text(json.dumps(results, indent=2))
    for phase in ("create", "worker"):
        if phase in results:
            row = results[phase]
            print(
                f"{phase}: {row['cpu_ms']:.2f} ms CPU, {row['wall_ms']:.2f} ms wall, "
                f"{row['statements']:.1f} statements, {row['commits']:.1f} commits, "
                f"{row['redis_round_trips']:.1f} + {row['redis_async_round_trips']:.1f} Redis "
                "round trips (broker + channel layer) per task"
            )
            for sql, c in list(row["by_statement"].items())[:15]:
                print(f"   {c:5.2f}  {sql}")


if __name__ == "__main__":
    main()
