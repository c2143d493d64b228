"""B1 tasks/get, B2 tools/call → CreateTaskResult, B4 tasks/get at scale, B6 end to end.

Every figure is a ratio to a floor measured in the same run with the same server software
(uvicorn) and the same load generator (hey): B1 against one primary-key SELECT through a bare
ASGI app with a psycopg async pool, B2 against one INSERT, B6 against Celery draining no-op jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import REPO, RESULTS, bench_database, free_port, median, uvicorn_argv
from bench.end_to_end import run_end_to_end, server_env

VERSION = "2026-07-28"
CAPS = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": CAPS,
}


def uvicorn(app: str, env: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen(
        uvicorn_argv(app, port, backlog=False),
        cwd=REPO,
        env=env,
        stdout=open(log, "w"),  # noqa: SIM115 - the process owns it until it exits
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    import httpx

    for _ in range(300):
        try:
            httpx.get(url + "/healthz", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    return process, url


def hey(
    url: str,
    *,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    seconds: int = 8,
    concurrency: int = 32,
    rate: float | None = None,
) -> dict[str, float]:
    if shutil.which("hey") is None:
        raise SystemExit(
            "bench: the load generator `hey` is not on PATH (`make bench` installs it: "
            "apt-get install hey)"
        )
    with tempfile.NamedTemporaryFile("wb", delete=False) as handle:
        handle.write(body)
    argv = [
        "hey",
        "-z",
        f"{seconds}s",
        "-c",
        str(concurrency),
        "-m",
        "POST",
        "-D",
        handle.name,
        "-disable-keepalive=false",
    ]
    if rate:
        argv += ["-q", f"{max(rate / concurrency, 0.1):.2f}"]
    for key, value in (headers or {}).items():
        argv += ["-H", f"{key}: {value}"]
    output = subprocess.run([*argv, url], capture_output=True, text=True, check=True).stdout
    os.unlink(handle.name)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))
    p50 = re.search(r"50%+ in ([\d.]+) secs", output)
    p99 = re.search(r"99%+ in ([\d.]+) secs", output)
    codes = dict(re.findall(r"\[(\d{3})\]\s+(\d+) responses", output))
    return {
        "rps": rps,
        "p50_ms": float(p50.group(1)) * 1000 if p50 else float("nan"),
        "p99_ms": float(p99.group(1)) * 1000 if p99 else float("nan"),
        "non_200": sum(int(n) for code, n in codes.items() if code != "200"),
        "ok_200": int(codes.get("200", 0)),
    }


def summary(results: list[dict[str, float]]) -> dict[str, float]:
    return {
        "rps": median([r["rps"] for r in results]),
        "p50_ms": median([r["p50_ms"] for r in results]),
        "p99_ms": median([r["p99_ms"] for r in results]),
        "non_200": sum(r["non_200"] for r in results),
        "ok_200": sum(r["ok_200"] for r in results),
        "runs": len(results),
    }


def interleaved(runs: int, ours: Any, floor: Any) -> tuple[dict[str, float], dict[str, float]]:
    """Median of ``runs`` alternating measurements of ours and the floor: drift on a shared
    machine hits both alike."""
    mine, floors = [], []
    for _ in range(runs):
        mine.append(ours())
        floors.append(floor())
    return summary(mine), summary(floors)


def answer(url: str, payload: bytes, headers: dict[str, str]) -> dict[str, Any]:
    """One request, checked: the load generator counts only status codes."""
    import httpx

    reply = httpx.post(url, content=payload, headers=headers, timeout=10)
    data = reply.json()
    if reply.status_code != 200 or "result" not in data:
        raise SystemExit(f"bench: {url} answered {reply.status_code} {data}")
    return data["result"]  # type: ignore[no-any-return]


def answered_by(url: str) -> dict[str, float]:
    import httpx

    text = httpx.get(url + "/metrics", timeout=10).text
    found = re.findall(r'^mcptasks_tasks_get_total\{path="(\w+)"\} (\S+)$', text, re.M)
    return {path: float(count) for path, count in found}


def mcp_headers(token: str, method: str, name: str) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "Accept": "application/json",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": method,
        "Mcp-Name": name,
        "Authorization": f"Bearer {token}",
    }


def body(method: str, params: dict[str, Any]) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": META}}
    ).encode()


def setup(url: str, extra_tasks: int) -> tuple[str, str]:
    os.environ.update(server_env(url))
    import django

    django.setup()
    from django.db import connection, transaction

    from audit.record import Actor
    from mcptasks import lifecycle, runner
    from mcptasks.management.commands.seed_demo import seed_cast
    from mcptasks.models import Task

    with transaction.atomic():
        cast = seed_cast()
    entry = cast["alice"]
    task, _ = lifecycle.task_create(
        spec=lifecycle.NewTask(
            tenant_id=entry["tenant"].pk,
            principal_id=entry["user"].pk,
            tool_name="echo_task",
            arguments={"text": "bench"},
            policy_revision="bench",
            ttl_ms=None,
        ),
        actor=Actor.system("bench"),
    )
    runner.run_task(task.pk)
    if extra_tasks:
        template = Task.objects.get(pk=task.pk)
        batch = []
        for _ in range(extra_tasks):
            template.pk = None
            clone = Task(
                **{
                    f.attname: getattr(template, f.attname)
                    for f in Task._meta.concrete_fields
                    if f.attname != "id"
                }
            )
            batch.append(clone)
            if len(batch) == 5000:
                Task.objects.bulk_create(batch)
                batch = []
        Task.objects.bulk_create(batch)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE mcptasks_task")
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS bench_floor (id text primary key, "
            "payload jsonb, created_at timestamptz default now())"
        )
    return entry["token"], task.pk


def run_http(
    url: str, runs: int, seconds: int, extra_tasks: int, results: dict[str, Any], *, create: bool
) -> None:
    token, task_id = setup(url, extra_tasks)
    env = server_env(url)
    floor_env = {**env, "FLOOR_DSN": url, "FLOOR_TASK_ID": task_id}
    ours, ours_url = uvicorn("mcptasks.asgi:application", env, RESULTS / "ours.log")
    floor, floor_url = uvicorn("bench.floor_app:app", floor_env, RESULTS / "floor.log")
    try:
        get_body = body("tasks/get", {"taskId": task_id})
        get_headers = mcp_headers(token, "tasks/get", task_id)
        got = answer(ours_url + "/mcp", get_body, get_headers)
        if got.get("taskId") != task_id or got.get("status") != "completed":
            raise SystemExit(f"bench: tasks/get answered {got}")
        hey(ours_url + "/mcp", body=get_body, headers=get_headers, seconds=2)  # warm-up
        hey(floor_url + "/get", seconds=2)
        paths_before = answered_by(ours_url)
        b1, b1_floor = interleaved(
            runs,
            lambda: hey(ours_url + "/mcp", body=get_body, headers=get_headers, seconds=seconds),
            lambda: hey(floor_url + "/get", seconds=seconds),
        )
        paths = answered_by(ours_url)
        b1_open = summary(
            [
                hey(
                    ours_url + "/mcp",
                    body=get_body,
                    headers=get_headers,
                    seconds=seconds,
                    concurrency=8,
                    rate=b1["rps"] / 2,
                )
                for _ in range(runs)
            ]
        )
        label = f"tasks_{extra_tasks + 1}"
        results.setdefault("B1", {})[label] = {
            "ours": b1,
            "floor": b1_floor,
            "open_loop_50pct": b1_open,
            "ratio": b1["rps"] / b1_floor["rps"],
            "answered_by": {k: v - paths_before.get(k, 0) for k, v in paths.items()},
        }
        if create:
            from mcptasks.models import Task

            call_body = body("tools/call", {"name": "echo_task", "arguments": {"text": "x"}})
            call_headers = mcp_headers(token, "tools/call", "echo_task")
            if answer(ours_url + "/mcp", call_body, call_headers).get("resultType") != "task":
                raise SystemExit("bench: tools/call echo_task did not create a task")
            tasks_before = Task.objects.count()
            cpu_before = _process_cpu_s(ours.pid)
            b2, b2_floor = interleaved(
                runs,
                lambda: hey(
                    ours_url + "/mcp", body=call_body, headers=call_headers, seconds=seconds
                ),
                lambda: hey(floor_url + "/insert", seconds=seconds),
            )
            results["B2"] = {
                "ours": b2,
                "floor": b2_floor,
                "ratio": b2["rps"] / b2_floor["rps"],
                # every 200 answer must be a committed task (hey counts only status codes)
                "tasks_created": Task.objects.count() - tasks_before,
            }
            # The server's CPU per created task: far less disturbed by a busy machine than rps.
            results["B2"]["server_cpu_ms_per_task"] = (
                1000
                * (_process_cpu_s(ours.pid) - cpu_before)
                / max(results["B2"]["tasks_created"], 1)
            )
    finally:
        for process in (ours, floor):
            process.terminate()
            process.wait(timeout=15)


def _process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=6)
    parser.add_argument("--scale", type=int, default=100_000)
    parser.add_argument("--e2e", type=int, default=2000)
    parser.add_argument("--phase", choices=["all", "hot", "scale"], default="all")
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.phase == "all":
        # Each phase in its own process: Django settings are bound to one database per process.
        for phase in ("hot", "scale"):
            subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--phase",
                    phase,
                    "--runs",
                    str(args.runs),
                    "--seconds",
                    str(args.seconds),
                    "--scale",
                    str(args.scale),
                    "--e2e",
                    str(args.e2e),
                ],
                check=True,
            )
        results = {**json.loads((RESULTS / "hot.json").read_text())}
        scale = json.loads((RESULTS / "scale.json").read_text())
        results["B1"].update(scale["B1"])
        small = results["B1"]["tasks_1000"]["ours"]["rps"]
        large = results["B1"][f"tasks_{args.scale}"]["ours"]["rps"]
        results["B4_tasks_get"] = {
            "rps_1000": small,
            f"rps_{args.scale}": large,
            "slowdown": small / large,
        }
        (RESULTS / "hot_paths.json").write_text(json.dumps(results, indent=2))
        print(json.dumps(results, indent=2))
        return
    results: dict[str, Any] = {}
    with bench_database(f"mcptasks_bench_{args.phase}_{os.getpid()}") as url:
        if args.phase == "hot":
            run_http(url, args.runs, args.seconds, 999, results, create=True)
            if args.e2e:
                run_end_to_end(url, args.e2e, results)
        else:
            run_http(url, args.runs, args.seconds, args.scale - 1, results, create=False)
        from django.db import connections

        connections.close_all()
    (RESULTS / f"{args.phase}.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
