"""Live updates at scale: N open subscriptions/listen streams on one web process.

For each server (Daphne, uvicorn) and each N: change → ``notifications/tasks`` receipt latency
on every stream (p50/p99, misses counted), RSS per stream, threads per process; then a leak
check (10,000 streams opened and closed; file descriptors, event-loop tasks and RSS back within
10 % of baseline). Runs on PostgreSQL + Redis (the production channel layer).

What is timed: the change is made by this process, as a worker process would make it (the
lifecycle verb ``task_answer_input``, broadcast through channels-redis after commit); the clock
starts when the transaction has committed and stops when a stream's bytes holding the new
state are read from its socket. The streams are held by ``--clients`` separate client
processes, each a plain epoll loop that only ``recv``s and timestamps on the hot path; frames
are parsed afterwards, and a stream counts as served for a change only if the frame it got
shows that change (its ``inputRequests`` count), so a missing or wrong frame is a miss.

    .venv/bin/python bench/streams.py [--servers daphne,uvicorn] [--streams 100,1000,2000]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import resource
import select
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
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
MARK = b'"notifications/tasks"'
OPEN_BATCH = 100
STREAMS_CAP = 100_000  # above any --streams and the leak check's 10,000


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


# ---------------------------------------------------------------- client processes


def notifications(chunks: list[tuple[float, bytes]]) -> list[tuple[float, int, str]]:
    """``(receipt time, inputRequests count, status)`` of each ``notifications/tasks`` frame;
    a frame's receipt time is that of the read that completed it."""
    found: list[tuple[float, int, str]] = []
    buffer = b""
    for received_at, data in chunks:
        buffer += data
        *events, buffer = buffer.split(b"\n\n")
        for event in events:
            start = event.find(b"data: ")
            if start < 0 or MARK not in event:
                continue
            params = json.loads(event[start + 6 :])["params"]
            found.append((received_at, len(params.get("inputRequests", {})), params["status"]))
    return found


class Client:
    """The streams of one client process: raw sockets on one epoll, reads timestamped."""

    def __init__(self, port: int, payload: bytes) -> None:
        self.port, self.payload = port, payload
        self.poller = select.epoll()
        self.sockets: dict[int, socket.socket] = {}
        self.chunks: dict[int, list[tuple[float, bytes]]] = {}
        self.frames: dict[int, int] = {}
        self.tails: dict[int, bytes] = {}
        self.target = 1
        self.reached = 0

    def open(self, count: int) -> None:
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", self.port))
            sock.sendall(self.payload)
            sock.setblocking(False)
            fd = sock.fileno()
            self.sockets[fd], self.chunks[fd], self.frames[fd], self.tails[fd] = sock, [], 0, b""
            self.poller.register(fd, select.EPOLLIN)

    def expect(self, frames: int) -> None:
        self.target = frames
        self.reached = sum(1 for n in self.frames.values() if n >= frames)

    def pump(self, timeout: float) -> None:
        for fd, _ in self.poller.poll(timeout):
            sock = self.sockets.get(fd)
            if sock is None:
                continue
            try:
                data = sock.recv(262144)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            received_at = time.monotonic()
            if not data:
                self.poller.unregister(fd)
                continue
            self.chunks[fd].append((received_at, data))
            tail = self.tails[fd]
            seen = (tail + data).count(MARK) - tail.count(MARK)
            self.tails[fd] = data[-len(MARK) :]
            if seen:
                before = self.frames[fd]
                self.frames[fd] = before + seen
                if before < self.target <= before + seen:
                    self.reached += 1

    def close(self) -> None:
        for fd, sock in self.sockets.items():
            try:
                self.poller.unregister(fd)
            except (OSError, ValueError):
                pass
            sock.close()
        self.sockets.clear()
        self.chunks.clear()
        self.frames.clear()
        self.tails.clear()
        self.reached = 0


def client_main(conn: Connection, port: int, payload: bytes) -> None:
    """Serve commands from the coordinator; keep reading every socket in between."""
    client = Client(port, payload)
    waiting: float | None = None  # deadline of a pending "wait"
    while True:
        if conn.poll(0):
            command, *args = conn.recv()
            if command == "open":
                client.open(args[0])
                conn.send(len(client.sockets))
            elif command == "wait":
                client.expect(args[0])
                waiting = time.monotonic() + args[1]
            elif command == "results":
                conn.send([notifications(chunks) for chunks in client.chunks.values()])
            elif command == "close":
                client.close()
                conn.send(True)
            elif command == "exit":
                return
        client.pump(0.02)
        if waiting is not None and (
            client.reached >= len(client.sockets) or time.monotonic() > waiting
        ):
            conn.send(client.reached)
            waiting = None


class Clients:
    """``count`` client processes; streams are spread evenly over them."""

    def __init__(self, count: int, port: int, payload: bytes) -> None:
        context = multiprocessing.get_context("spawn")
        self.pipes: list[Connection] = []
        self.processes = []
        for _ in range(count):
            here, there = context.Pipe()
            process = context.Process(target=client_main, args=(there, port, payload), daemon=True)
            process.start()
            self.pipes.append(here)
            self.processes.append(process)

    def _all(self, *command: Any) -> list[Any]:
        for pipe in self.pipes:
            pipe.send(command)
        return [pipe.recv() for pipe in self.pipes]

    def open(self, count: int) -> None:
        """Open ``count`` more streams, ``OPEN_BATCH`` at a time, each batch acknowledged
        with its first state before the next."""
        held = 0
        while held < count:
            batch = min(OPEN_BATCH, count - held)
            shares = [batch // len(self.pipes)] * len(self.pipes)
            for index in range(batch % len(self.pipes)):
                shares[index] += 1
            for pipe, share in zip(self.pipes, shares, strict=True):
                pipe.send(("open", share))
            for pipe in self.pipes:
                pipe.recv()
            held += batch
            self.wait(1, 60)

    def wait(self, frames: int, timeout: float) -> int:
        """Until every stream has ``frames`` notifications (or ``timeout``); how many have."""
        return sum(self._all("wait", frames, timeout))

    def results(self) -> list[list[tuple[float, int, str]]]:
        return [stream for per_client in self._all("results") for stream in per_client]

    def close(self) -> None:
        self._all("close")

    def exit(self) -> None:
        for pipe in self.pipes:
            pipe.send(("exit",))
        for process in self.processes:
            process.join(timeout=10)


# ---------------------------------------------------------------- coordinator


def answer(cast: dict, task_id: str, key: str) -> float:
    """Answer one question as a worker process would change a task; the commit time."""
    from django.db import transaction

    from audit.record import Actor
    from mcptasks import lifecycle

    committed: list[float] = []
    with transaction.atomic():
        # Registered first, so it runs right after commit, before the broadcast callback.
        transaction.on_commit(lambda: committed.append(time.monotonic()))
        lifecycle.task_answer_input(
            task_id=task_id,
            key=key,
            response={"action": "accept", "content": {"ok": True}},
            actor=Actor.for_user(cast["alice"]["user"], kind="principal"),
            via="mcp",
        )
    return committed[0]


def profile_start(server: Server, name: str) -> subprocess.Popen[bytes] | None:
    """With ``BENCH_PROFILE`` set, sample the server with py-spy while changes fan out
    (collapsed stacks in bench/results/profile-<server>-<streams>.txt)."""
    if not os.environ.get("BENCH_PROFILE"):
        return None
    spy = Path(sys.executable).parent / "py-spy"
    out = RESULTS / f"profile-{name}.txt"
    argv = [str(spy), "record", "-p", str(server.process.pid), "-r", "250", "-f", "raw"]
    return subprocess.Popen(
        [*argv, "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def profile_stop(profiler: subprocess.Popen[bytes] | None) -> None:
    if profiler is not None:
        profiler.send_signal(signal.SIGINT)
        profiler.wait(timeout=30)


def measure(
    server: Server, cast: dict, task_id: str, count: int, rounds: int, clients: int
) -> dict[str, Any]:
    token = cast["alice"]["token"]
    listen = request_bytes(
        server.port, token, "subscriptions/listen", {"notifications": {"taskIds": [task_id]}}
    )
    pool = Clients(clients, server.port, listen)
    try:
        pool.open(20)  # warm the server up before the baseline
        pool.close()
        time.sleep(1)
        base_rss, base_threads = server.rss_kib(), server.threads()
        pool.open(count)
        time.sleep(1)
        rss_per_stream = (server.rss_kib() - base_rss) / count
        threads = server.threads()
        committed: list[float] = []
        profiler = profile_start(server, f"{server.kind}-{count}")
        for round_number in range(rounds):
            committed.append(answer(cast, task_id, f"q{round_number}"))
            pool.wait(round_number + 2, 30)
            time.sleep(0.3)
        profile_stop(profiler)
        streams = pool.results()
        pool.close()
    finally:
        pool.exit()
    questions = rounds + 1
    latencies: list[float] = []
    per_round: list[list[float]] = [[] for _ in committed]
    missed = 0
    for frames in streams:
        by_pending = {pending: received_at for received_at, pending, _ in frames}
        for round_number, at in enumerate(committed):
            received_at = by_pending.get(questions - 1 - round_number)
            if received_at is None:
                missed += 1
            else:
                latencies.append(received_at - at)
                per_round[round_number].append(received_at - at)
    return {
        "streams": count,
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "max_ms": max(latencies, default=float("nan")) * 1000,
        "missed": missed,
        "rounds_first_last_ms": [
            [round(min(r, default=0) * 1000, 1), round(max(r, default=0) * 1000, 1)]
            for r in per_round
        ],
        "rss_per_stream_kib": rss_per_stream,
        "threads": threads,
        "threads_before": base_threads,
    }


def scrape(server: Server, name: str) -> float | None:
    import httpx

    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    match = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(match.group(1)) if match else None


def released(server: Server, fds: int, timeout: float = 30) -> None:
    """Until the server has let go of closed streams (its descriptors are back to ``fds``),
    so batches do not pile up: every batch of the leak check peaks at the same 500 streams."""
    deadline = time.monotonic() + timeout
    while server.fds() > fds + 2 and time.monotonic() < deadline:
        time.sleep(0.05)


def leak_check(server: Server, cast: dict, task_id: str, total: int, clients: int) -> dict:
    listen = request_bytes(
        server.port,
        cast["alice"]["token"],
        "subscriptions/listen",
        {"notifications": {"taskIds": [task_id]}},
    )
    pool = Clients(clients, server.port, listen)
    try:
        fds = server.fds()
        pool.open(500)  # warm up: the baseline is a server that has served streams
        pool.close()
        released(server, fds)
        time.sleep(2)
        before = {
            "fds": server.fds(),
            "rss_kib": server.rss_kib(),
            "loop_tasks": scrape(server, "mcptasks_event_loop_tasks"),
        }
        trace = []  # RSS after every 2,000 streams: a leak keeps growing, an allocator levels off
        for start in range(0, total, 500):
            pool.open(500)
            pool.close()
            released(server, before["fds"])
            if (start + 500) % 2000 == 0:
                trace.append(server.rss_kib())
        time.sleep(3)
        after = {
            "fds": server.fds(),
            "rss_kib": server.rss_kib(),
            "loop_tasks": scrape(server, "mcptasks_event_loop_tasks"),
        }
    finally:
        pool.exit()
    within = all(
        after[k] is not None and before[k] is not None and after[k] <= before[k] * 1.10 + 2
        for k in before
    )
    return {
        "opened_and_closed": total,
        "before": before,
        "after": after,
        "within_10_percent": within,
        "rss_kib_every_2000": trace,
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
    parser.add_argument("--clients", type=int, default=1, help="client processes")
    args = parser.parse_args()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    RESULTS.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"servers": {}}
    with bench_database(f"mcptasks_bench_streams_{os.getpid()}") as url:
        cast = setup_django(url)
        from mcptasks import events

        events.broadcast("warm-up", 0, 0)  # the sender loop and its Redis connection
        for kind in args.servers.split(","):
            # Every stream is alice's: the per-principal cap (100 per web process by default)
            # would refuse all but the first hundred.
            env = bench_env(url, MCPTASKS_MAX_LISTEN_STREAMS_PER_PRINCIPAL=str(STREAMS_CAP))
            server = Server(kind, env, RESULTS / f"streams-{kind}.log")
            rows = []
            leak = None
            try:
                for count in (int(n) for n in args.streams.split(",") if n):
                    task_id = make_task(cast, args.rounds + 1)
                    rows.append(measure(server, cast, task_id, count, args.rounds, args.clients))
                    print(f"{kind:8} {rows[-1]}", flush=True)
                if args.leak:
                    leak = leak_check(server, cast, make_task(cast, 2), args.leak, args.clients)
                    print(f"{kind:8} leak {leak}", flush=True)
            finally:
                server.stop()
            results["servers"][kind] = {"version": server.version(), "rows": rows, "leak": leak}
    (RESULTS / "streams.json").write_text(json.dumps(results, indent=2))
    print("\nserver   version   streams  p50 ms  p99 ms  max ms  missed  RSS/stream KiB  threads")
    for kind, data in results["servers"].items():
        for row in data["rows"]:
            print(
                f"{kind:8} {data['version']:9} {row['streams']:7} {row['p50_ms']:7.1f} "
                f"{row['p99_ms']:7.1f} {row['max_ms']:7.1f} {row['missed']:7} "
                f"{row['rss_per_stream_kib']:15.1f} {row['threads']:8}"
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
