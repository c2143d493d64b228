"""Live updates at scale: N open subscriptions/listen streams on one web process.

For each server (Daphne, uvicorn) and each N: change → notifications/tasks receipt latency on
every stream (p50/p99), RSS per stream, threads per process; then a leak check (10,000 streams
opened and closed; file descriptors, event-loop tasks and RSS back within 10 % of baseline).
Runs on PostgreSQL + Redis (the production channel layer).

    .venv/bin/python bench/streams.py [--servers daphne,uvicorn] [--streams 100,1000,2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import RESULTS, Server, bench_database, bench_env, median, percentile

VERSION = "2026-07-28"
CAPS = {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}
META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": CAPS,
}


def setup_django(database_url: str) -> dict[str, Any]:
    os.environ.update(bench_env(database_url))
    import django

    django.setup()
    from django.db import transaction

    from mcptasks.management.commands.seed_demo import seed_cast

    with transaction.atomic():
        return seed_cast()


def request_bytes(
    port: int, token: str, method: str, params: dict, name: str | None = None, request_id: int = 1
) -> bytes:
    body = json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**params, "_meta": META}}
    ).encode()
    headers = [
        "POST /mcp HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
        f"MCP-Protocol-Version: {VERSION}",
        f"Mcp-Method: {method}",
        f"Authorization: Bearer {token}",
        f"Content-Length: {len(body)}",
    ]
    if name:
        headers.append(f"Mcp-Name: {name}")
    return ("\r\n".join(headers) + "\r\n\r\n").encode() + body


class Stream:
    """One raw SSE connection: records the receipt time of each notified version."""

    def __init__(self) -> None:
        self.received: dict[int, float] = {}
        self.ready = asyncio.Event()
        self.writer: asyncio.StreamWriter | None = None
        self.task: asyncio.Task | None = None

    async def open(self, port: int, payload: bytes) -> None:
        reader, self.writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
        self.writer.write(payload)
        await self.writer.drain()
        self.task = asyncio.create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        buffer = b""
        try:
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    return
                now = time.perf_counter()
                buffer += chunk
                while b"\n\n" in buffer:
                    event, buffer = buffer.split(b"\n\n", 1)
                    for line in event.split(b"\n"):
                        if b"data: " in line:
                            data = line.split(b"data: ", 1)[1]
                            if b'"notifications/tasks"' in data:
                                version = len(json.loads(data)["params"].get("inputRequests", {}))
                                self.received.setdefault(version, now)
                                self.ready.set()
        except (ConnectionError, asyncio.CancelledError):
            return

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except ConnectionError:
                pass
        if self.task is not None:
            self.task.cancel()


async def post(port: int, payload: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(payload)
    await writer.drain()
    data = await reader.read(65536)
    writer.close()
    return data


async def measure(
    server: Server, token: str, task_id: str, count: int, rounds: int, questions: int
) -> dict[str, Any]:
    port = server.port
    listen = request_bytes(
        port, token, "subscriptions/listen", {"notifications": {"taskIds": [task_id]}}
    )
    warm = [Stream() for _ in range(20)]  # warm the server up before the baseline
    await asyncio.gather(*(s.open(port, listen) for s in warm))
    await asyncio.wait_for(asyncio.gather(*(s.ready.wait() for s in warm)), 60)
    await asyncio.gather(*(s.close() for s in warm))
    await asyncio.sleep(1)
    base_rss, base_threads = server.rss_kib(), server.threads()
    streams = [Stream() for _ in range(count)]
    for start in range(0, count, 200):
        await asyncio.gather(*(s.open(port, listen) for s in streams[start : start + 200]))
    await asyncio.wait_for(asyncio.gather(*(s.ready.wait() for s in streams)), 120)
    await asyncio.sleep(1)
    rss_per_stream = (server.rss_kib() - base_rss) / count
    threads = server.threads()
    latencies: list[float] = []
    remaining = questions
    for round_number in range(rounds):
        key = f"q{round_number}"
        remaining -= 1
        update = request_bytes(
            port,
            token,
            "tasks/update",
            {
                "taskId": task_id,
                "inputResponses": {key: {"action": "accept", "content": {"ok": True}}},
            },
            name=task_id,
            request_id=100 + round_number,
        )
        sent = time.perf_counter()
        await post(port, update)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(remaining in s.received for s in streams):
            await asyncio.sleep(0.005)
        latencies += [s.received[remaining] - sent for s in streams if remaining in s.received]
        await asyncio.sleep(0.3)
    missing = sum(
        1 for s in streams for r in range(questions - rounds, questions) if r not in s.received
    )
    await asyncio.gather(*(s.close() for s in streams))
    return {
        "streams": count,
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "missed": missing,
        "rss_per_stream_kib": rss_per_stream,
        "threads": threads,
        "threads_before": base_threads,
    }


def scrape(server: Server, name: str) -> float | None:
    import httpx

    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    match = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(match.group(1)) if match else None


async def leak_check(server: Server, token: str, task_id: str, total: int) -> dict[str, Any]:
    port = server.port
    listen = request_bytes(
        port, token, "subscriptions/listen", {"notifications": {"taskIds": [task_id]}}
    )
    await asyncio.sleep(1)
    before = {
        "fds": server.fds(),
        "rss_kib": server.rss_kib(),
        "loop_tasks": scrape(server, "mcptasks_event_loop_tasks"),
    }
    for start in range(0, total, 500):
        batch = [Stream() for _ in range(min(500, total - start))]
        await asyncio.gather(*(s.open(port, listen) for s in batch))
        await asyncio.wait_for(asyncio.gather(*(s.ready.wait() for s in batch)), 60)
        await asyncio.gather(*(s.close() for s in batch))
    await asyncio.sleep(3)
    after = {
        "fds": server.fds(),
        "rss_kib": server.rss_kib(),
        "loop_tasks": scrape(server, "mcptasks_event_loop_tasks"),
    }
    within = all(
        after[k] is not None and before[k] is not None and after[k] <= before[k] * 1.10 + 2
        for k in before
    )
    return {
        "opened_and_closed": total,
        "before": before,
        "after": after,
        "within_10_percent": within,
    }


def make_task(cast: dict, questions: int) -> str:
    from audit.record import Actor
    from mcptasks import lifecycle, runner

    entry = cast["alice"]
    task, _ = lifecycle.task_create(
        spec=lifecycle.NewTask(
            tenant_id=entry["tenant"].pk,
            principal_id=entry["user"].pk,
            tool_name="many_questions",
            arguments={"count": questions},
            policy_revision="bench",
            ttl_ms=3_600_000,
            client_capabilities=CAPS,
        ),
        actor=Actor.system("bench"),
    )
    runner.run_task(task.pk)
    return task.pk


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--servers", default="uvicorn,daphne")
    parser.add_argument("--streams", default="100,1000,2000")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--leak", type=int, default=10_000)
    args = parser.parse_args()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    RESULTS.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"servers": {}}
    with bench_database(f"mcptasks_bench_streams_{os.getpid()}") as url:
        cast = setup_django(url)
        token = cast["alice"]["token"]
        for kind in args.servers.split(","):
            server = Server(kind, bench_env(url), RESULTS / f"streams-{kind}.log")
            rows = []
            try:
                for count in (int(n) for n in args.streams.split(",")):
                    questions = args.rounds + 1
                    task_id = make_task(cast, questions)
                    rows.append(
                        asyncio.run(measure(server, token, task_id, count, args.rounds, questions))
                    )
                    print(f"{kind:8} {rows[-1]}", flush=True)
                leak = (
                    asyncio.run(leak_check(server, token, make_task(cast, 2), args.leak))
                    if args.leak
                    else None
                )
                print(f"{kind:8} leak {leak}", flush=True)
            finally:
                server.stop()
            results["servers"][kind] = {"version": server.version(), "rows": rows, "leak": leak}
    (RESULTS / "streams.json").write_text(json.dumps(results, indent=2))
    print("\nserver   version   streams  p50 ms  p99 ms  missed  RSS/stream KiB  threads")
    for kind, data in results["servers"].items():
        for row in data["rows"]:
            print(
                f"{kind:8} {data['version']:9} {row['streams']:7} {row['p50_ms']:7.1f} "
                f"{row['p99_ms']:7.1f} {row['missed']:7} {row['rss_per_stream_kib']:15.1f} "
                f"{row['threads']:8}"
            )
        if data["leak"]:
            print(
                f"{kind:8} leak check ({data['leak']['opened_and_closed']} streams): "
                f"{'PASS' if data['leak']['within_10_percent'] else 'FAIL'} "
                f"before={data['leak']['before']} after={data['leak']['after']}"
            )
    print(
        f"median p99 across servers: "
        f"{median([r['p99_ms'] for d in results['servers'].values() for r in d['rows']]):.1f}"
    )


if __name__ == "__main__":
    main()
