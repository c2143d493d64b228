"""Peers: mcptasks against FastMCP + fastmcp-tasks, the same three workloads, side by side.

    .venv/bin/python bench/peers.py [--rounds 2] [--seconds 6] [--tasks 300]

Started and stopped here, everything on 127.0.0.1 and free ports: a private ``redis-server``
(mcptasks' broker and channel layer on databases 3–4, Docket on database 6, so two runs never
share a queue), a throwaway PostgreSQL database (``bench.common.bench_database``), FastMCP 4 +
fastmcp-tasks with its Docket backend and one no-op ``task=True`` tool under one uvicorn process
(``bench/peer_fastmcp_app.py``; Docket's worker runs in it), and mcptasks as documented for
production — ``manage.py serve`` (uvicorn, started by the command) and, separately, plain
``uvicorn mcptasks.asgi:application`` and, for the record, ``manage.py serve --server daphne``
(``--servers``), on PostgreSQL and Redis, ``WORKERS`` solo Celery worker processes (one per core) and beat —
with the ``echo_task`` tool and the poll and active-task limits raised
(``bench.end_to_end.server_env``).

Workloads, each in ``--rounds`` rounds with the servers alternating inside a round:
- ``tasks/get`` of a completed task, 32 connections (``hey``);
- ``tools/call`` → ``CreateTaskResult``, 16 connections (``hey``), then the creation p99 of each
  mcptasks server at an open-loop half of its rate;
- end to end: ``--tasks`` tasks created and polled (every ``POLL_S``) to completion, 16 at a
  time, by a small keep-alive asyncio client (``bench/peer_client.py``).
Every answer's shape is checked once before the load (``hey`` counts status codes only), and
after a creation run the next measurement waits until the servers and workers are idle again.
The JSON goes to ``bench/results/peers.json`` (``--out``); the servers' logs to
``bench/results/peers_logs/<pid>/``, removed after a run that ended well.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import (
    BIN,
    RESULTS,
    Child,
    bench_database,
    free_port,
    median,
    private_redis,
    tree_cpu_s,
    uvicorn_argv,
    worker_argv,
)
from bench.end_to_end import server_env
from bench.hot_paths import hey, summary
from bench.peer_client import Peer, end_to_end, one_call

TARGETS = {"get": 3.0, "create": 1.5, "e2e": 1.5}
WORKERS = 2  # this machine's cores
CREATE_P99_TARGET_MS = 50.0
OPEN_LOOP_ANSWERS = 200
# This run's server logs (kept after a failure): a run beside another never shares a file.
LOGS = RESULTS / "peers_logs" / str(os.getpid())


def start(stack: ExitStack, name: str, argv: list[str], env: dict[str, str]) -> Child:
    """``argv`` as a child in its own session, stopped when ``stack`` unwinds."""
    process = Child(argv, env, LOGS / f"{name}.log", name)
    stack.callback(process.stop, 20)
    return process


def wait_http(process: Child, url: str) -> None:
    import httpx

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and process.alive():
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError(f"{process.name} did not start; see {process.log.name}")


def wait_idle(pids: set[int], limit_s: float = 180.0) -> float:
    """Wait until the processes use under 10 % of a core for a second (queued work drained)."""
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        before = tree_cpu_s(pids)
        time.sleep(1.0)
        if tree_cpu_s(pids) - before < 0.1:
            break
    return time.monotonic() - started


def measure(
    peers: dict[str, Peer], args: argparse.Namespace, pids: set[int], workers: set[int]
) -> dict[str, Any]:
    """Every workload of every peer; ``pids``: all the bench started (PostgreSQL is not one),
    ``workers``: mcptasks' Celery worker."""
    results: dict[str, Any] = {name: {} for name in peers}
    for peer in peers.values():  # warm-up, and every answer's shape checked once
        peer.completed_task = asyncio.run(one_call(peer))
        hey(peer.url, body=peer.get_body(), headers=peer.headers("tasks/get"), seconds=2)
    wait_idle(pids)
    runs: dict[str, dict[str, list[dict[str, float]]]] = {
        name: {"get": [], "create": [], "e2e": []} for name in peers
    }
    for _ in range(args.rounds):
        for name, peer in peers.items():
            runs[name]["get"].append(
                hey(
                    peer.url,
                    body=peer.get_body(),
                    headers=peer.headers("tasks/get"),
                    seconds=args.seconds,
                    concurrency=32,
                )
            )
        for name, peer in peers.items():
            cpu = tree_cpu_s(pids)
            run = hey(
                peer.url,
                body=peer.call_body(),
                headers=peer.headers("tools/call"),
                seconds=args.seconds,
                concurrency=16,
            )
            run["drain_s"] = wait_idle(pids)
            # everything this run cost (web process, workers, broker, database, this machine's
            # other processes excluded) per created task, drain of the queued runs included
            run["cpu_ms_per_task_all_started"] = (
                1000 * (tree_cpu_s(pids) - cpu) / max(run["ok_200"], 1)
            )
            runs[name]["create"].append(run)
        for name, peer in peers.items():
            cpu, worker_cpu = tree_cpu_s(pids), tree_cpu_s(workers)
            run = asyncio.run(end_to_end(peer, args.tasks, 16))
            wait_idle(pids)
            # per task: everything started (the other idle servers' ticks included), and for
            # mcptasks its Celery worker's share (pool processes included)
            run["cpu_ms_per_task_all_started"] = 1000 * (tree_cpu_s(pids) - cpu) / args.tasks
            if peer.kind != "fastmcp":
                run["worker_cpu_ms_per_task"] = (
                    1000 * (tree_cpu_s(workers) - worker_cpu) / args.tasks
                )
            runs[name]["e2e"].append(run)
    for name, peer in peers.items():
        entry = results[name]
        entry["get"] = summary(runs[name]["get"])
        entry["create"] = summary(runs[name]["create"])
        entry["create"]["cpu_ms_per_task_all_started"] = median(
            [r["cpu_ms_per_task_all_started"] for r in runs[name]["create"]]
        )
        entry["e2e"] = {
            key: median([r[key] for r in runs[name]["e2e"]]) for key in runs[name]["e2e"][0]
        }
        entry["runs"] = runs[name]
        if peer.kind != "fastmcp":
            half = entry["create"]["rps"] / 2
            entry["create_open_loop_50pct"] = hey(
                peer.url,
                body=peer.call_body(),
                headers=peer.headers("tools/call"),
                # hey prints a p99 only from 100 answers on
                seconds=max(args.seconds, math.ceil(OPEN_LOOP_ANSWERS / half)),
                concurrency=8,
                rate=half,
            )
            entry["create_open_loop_50pct"]["rate"] = half
            wait_idle(pids)
    return results


def ratios(results: dict[str, Any]) -> dict[str, dict[str, float]]:
    peer = results["fastmcp"]
    out: dict[str, dict[str, float]] = {}
    for name, entry in results.items():
        if name == "fastmcp":
            continue
        out[name] = {
            "get": entry["get"]["rps"] / peer["get"]["rps"],
            "create": entry["create"]["rps"] / peer["create"]["rps"],
            "e2e": entry["e2e"]["tasks_per_s"] / peer["e2e"]["tasks_per_s"],
        }
    return out


def table(results: dict[str, Any], ratio: dict[str, dict[str, float]]) -> list[str]:
    lines = [
        f"{'server':18} {'workload':10} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'ratio':>7} {'target':>7}"
    ]
    for name, entry in results.items():
        for workload, key in (("get", "get"), ("create", "create"), ("e2e", "e2e")):
            row = entry[key]
            rate = row.get("rps", row.get("tasks_per_s"))
            shown = ratio.get(name, {}).get(workload)
            lines.append(
                f"{name:18} {workload:10} {rate:9.1f} {row['p50_ms']:8.1f} {row['p99_ms']:8.1f} "
                + (
                    f"{shown:6.2f}× {TARGETS[workload]:5.1f}× "
                    f"{'pass' if shown >= TARGETS[workload] else 'FAIL'}"
                    if shown is not None
                    else ""
                )
            )
        if "create_open_loop_50pct" in entry:
            open_loop = entry["create_open_loop_50pct"]
            lines.append(
                f"{name:18} {'create@50%':10} {open_loop['rps']:9.1f} "
                f"{open_loop['p50_ms']:8.1f} {open_loop['p99_ms']:8.1f}  p99 target < "
                f"{CREATE_P99_TARGET_MS:.0f} ms "
                f"{'pass' if open_loop['p99_ms'] < CREATE_P99_TARGET_MS else 'FAIL'}"
            )
    lines.append("e2e: req/s column is tasks/s; p50/p99 are per task (created → seen completed)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=6)
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument(
        "--servers",
        default="serve,uvicorn,daphne",
        help="mcptasks under (comma list): serve (manage.py serve: uvicorn), uvicorn (its CLI), "
        "daphne (manage.py serve --server daphne)",
    )
    parser.add_argument("--out", default="peers.json", help="file name in bench/results/")
    args = parser.parse_args()
    unknown = set(args.servers.split(",")) - {"serve", "uvicorn", "daphne"}
    if unknown:
        parser.error(f"--servers: no server {', '.join(sorted(unknown))} (serve, uvicorn, daphne)")
    LOGS.mkdir(parents=True, exist_ok=True)
    # SIGTERM (and Ctrl-C's KeyboardInterrupt) unwind the ExitStack: every child is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    with ExitStack() as stack:
        redis = stack.enter_context(private_redis())
        url = stack.enter_context(bench_database(f"mcptasks_bench_peers_{os.getpid()}"))
        token = seed(url)
        var_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="peers-var-"))
        env = {**server_env(url), "MCPTASKS_VAR_DIR": var_dir}
        pids = {redis.pid}
        beat = start(
            stack, "beat", [str(BIN / "celery"), "-A", "mcptasks", "beat", "-l", "warning"], env
        )
        pids.add(beat.process.pid)
        workers = {
            start(stack, f"celery{n}", worker_argv(f"peers{os.getpid()}-{n}"), env).process.pid
            for n in range(WORKERS)
        }
        pids |= workers
        port = free_port()
        fastmcp = start(
            stack,
            "fastmcp",
            uvicorn_argv("bench.peer_fastmcp_app:app", port, lifespan="on"),
            {
                **os.environ,
                "PEER_DOCKET_URL": f"redis://{os.environ['BENCH_REDIS']}/6",
                "FASTMCP_LOG_LEVEL": "WARNING",
            },
        )
        peers = {"fastmcp": Peer("fastmcp", f"http://127.0.0.1:{port}/mcp", None)}
        processes = {"fastmcp": fastmcp}
        pids.add(fastmcp.process.pid)
        for kind in args.servers.split(","):
            port = free_port()
            if kind in ("serve", "daphne"):
                argv = [str(BIN / "python"), "manage.py", "serve", "--no-worker"]
                argv += ["--host", "127.0.0.1", "--port", str(port)]
                argv += ["--server", "daphne"] if kind == "daphne" else []
            else:
                argv = uvicorn_argv("mcptasks.asgi:application", port)
            processes[f"mcptasks_{kind}"] = start(stack, f"mcptasks_{kind}", argv, env)
            pids.add(processes[f"mcptasks_{kind}"].process.pid)
            peers[f"mcptasks_{kind}"] = Peer(kind, f"http://127.0.0.1:{port}/mcp", token)
        for name, peer in peers.items():
            wait_http(processes[name], peer.url)
        time.sleep(5)  # the Celery workers' start-up
        results = measure(peers, args, pids, workers)
        from django.db import connections

        connections.close_all()
    ratio = ratios(results)
    from importlib import metadata

    report = {
        "versions": {
            package: metadata.version(package)
            for package in ("fastmcp", "fastmcp-tasks", "pydocket", "uvicorn", "daphne", "celery")
        },
        "load_average": os.getloadavg(),
        "args": vars(args),
        "targets": TARGETS,
        "ratio": ratio,
        "results": results,
        "seconds": time.monotonic() - started,
    }
    (RESULTS / args.out).write_text(json.dumps(report, indent=2))
    shutil.rmtree(LOGS, ignore_errors=True)
    print("\n".join(table(results, ratio)))
    print(f"versions {report['versions']}; load average {report['load_average']}")


def seed(url: str) -> str:
    """The demo cast in the bench database; alice's bearer token."""
    os.environ.update(server_env(url))
    import django

    django.setup()
    from django.db import transaction

    from mcptasks.management.commands.seed_demo import seed_cast

    with transaction.atomic():
        cast = seed_cast()
    return str(cast["alice"]["token"])


if __name__ == "__main__":
    main()
