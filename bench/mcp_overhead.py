"""Benchmark: what the MCP endpoint costs. ``tools/list`` on ``/mcp`` against a bare ASGI
endpoint that returns the same bytes as a constant, both mounted in one server process.

    .venv/bin/python bench/mcp_overhead.py [--seconds 10] [--connections 16]
        [--server daphne|uvicorn] [--tokenless] [--pg]

The server is a child process (Daphne by default, as ``manage.py serve``; or uvicorn) on a free
127.0.0.1 port, with an ASGI router that sends ``/mcp`` to the product's application and
``/const`` to a constant endpoint. Both answer the same response body, so the difference is the
endpoint's own work: header and envelope checks, bearer-token lookup (or the conformance
principal with ``--tokenless``), dispatch to the thread pool, the handler and JSON encoding.
The load is a small keep-alive HTTP/1.1 client on asyncio (``--connections`` concurrent
connections). Reported per endpoint: requests/s, latency p50/p99, and the server process's CPU
time per request (from /proc, so a load generator sharing the cores does not blur it).

The database is a throwaway SQLite file (the embedded default), or a throwaway PostgreSQL
database with ``--pg`` (``BENCH_PG_SERVER``, default postgres://postgres@127.0.0.1:5432).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.common import read_response  # noqa: E402

VERSION = "2026-07-28"
BODY = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/list",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": VERSION,
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        },
    }
).encode()


# ---------------------------------------------------------------- the server process
def build_application() -> Any:
    """``/const`` → a constant response; everything else → the product's ASGI application."""
    from mcptasks.asgi import application as product

    constant = {"body": b"{}"}

    async def router(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/const":
            await product(scope, receive, send)
            return
        while (await receive()).get("more_body"):
            pass  # read the request body, as /mcp does
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": constant["body"]})

    router.constant = constant  # type: ignore[attr-defined]
    return router


def serve(port: int, server: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcptasks.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    application = build_application()
    # The constant is what /mcp answers for tools/list (same size, same bytes on the wire).
    application.constant["body"] = os.environ["BENCH_CONSTANT_BODY"].encode()
    if server == "uvicorn":
        import uvicorn

        uvicorn.run(
            application,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            access_log=False,
            lifespan="off",
        )
        return
    from daphne.endpoints import build_endpoint_description_strings
    from daphne.server import Server

    Server(
        application=application,
        endpoints=build_endpoint_description_strings(host="127.0.0.1", port=port),
        verbosity=0,
    ).run()


# ---------------------------------------------------------------- the load generator
def request_bytes(path: str, token: str | None) -> bytes:
    headers = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
        f"MCP-Protocol-Version: {VERSION}",
        "Mcp-Method: tools/list",
        f"Content-Length: {len(BODY)}",
    ]
    if token:
        headers.append(f"Authorization: Bearer {token}")
    return ("\r\n".join(headers) + "\r\n\r\n").encode() + BODY


async def one_connection(
    port: int, payload: bytes, deadline: float, latencies: list[float], expected: bytes
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            writer.write(payload)
            status, body = await read_response(reader)
            if status != 200 or expected not in body:
                raise RuntimeError(f"unexpected answer {status}: {body[:200]!r}")
            latencies.append(time.perf_counter() - started)
    finally:
        writer.close()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def load(
    port: int,
    path: str,
    token: str | None,
    seconds: float,
    connections: int,
    pid: int,
    expected: bytes,
) -> dict[str, float]:
    payload = request_bytes(path, token)
    warm: list[float] = []
    await asyncio.gather(
        *(
            one_connection(port, payload, time.perf_counter() + 1.0, warm, expected)
            for _ in range(connections)
        )
    )
    latencies: list[float] = []
    cpu_before, started = cpu_seconds(pid), time.perf_counter()
    deadline = started + seconds
    await asyncio.gather(
        *(one_connection(port, payload, deadline, latencies, expected) for _ in range(connections))
    )
    elapsed, cpu = time.perf_counter() - started, cpu_seconds(pid) - cpu_before
    latencies.sort()
    return {
        "requests": len(latencies),
        "rps": len(latencies) / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
        "server_cpu_us_per_request": cpu / len(latencies) * 1e6,
    }


# ---------------------------------------------------------------- set-up and report
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def prepare(tokenless: bool) -> tuple[str | None, bytes]:
    """Migrate, create a principal with a token; return it and the /mcp tools/list body."""
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    from django.contrib.auth import get_user_model

    from mcptasks.asgi import application
    from mcptasks.models import ApiToken, Membership, Role, Tenant

    tenant, _ = Tenant.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    user, _ = get_user_model().objects.get_or_create(username="bench")
    Membership.objects.get_or_create(user=user, tenant=tenant, role=Role.MEMBER)
    _, token = ApiToken.issue(user=user, tenant=tenant, name="bench")
    headers = [
        (b"host", b"127.0.0.1"),
        (b"content-type", b"application/json"),
        (b"mcp-protocol-version", VERSION.encode()),
        (b"mcp-method", b"tools/list"),
        (b"authorization", f"Bearer {token}".encode()),
    ]
    sent: list[dict[str, Any]] = []

    async def capture() -> None:
        events = [{"type": "http.request", "body": BODY, "more_body": False}]

        async def receive() -> dict[str, Any]:
            return events.pop(0)

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await application(
            {
                "type": "http",
                "method": "POST",
                "path": "/mcp",
                "headers": headers,
                "query_string": b"",
            },
            receive,
            send,
        )

    asyncio.run(capture())
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert json.loads(body)["result"]["tools"], body
    return (None if tokenless else token), body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--server", choices=("daphne", "uvicorn"), default="daphne")
    parser.add_argument(
        "--tokenless", action="store_true", help="conformance mode: no token lookup per request"
    )
    parser.add_argument("--pg", action="store_true", help="a throwaway PostgreSQL database")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.server)
        return

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mcptasks.settings")
    os.environ["LOG_LEVEL"] = "WARNING"
    os.environ["DEBUG"] = "false"
    os.environ.pop("REDIS_URL", None)
    if args.tokenless:
        os.environ["MCPTASKS_CONFORMANCE_MODE"] = "true"
    sys.path.insert(0, str(ROOT))
    with ExitStack() as stack:
        if args.pg:
            os.environ["DATABASE_POOL"] = "true"  # the product's default (bench/_pg turns it off)
            sys.path.insert(0, str(ROOT / "bench"))
            from _pg import dedicated_database, setup_django

            setup_django(stack.enter_context(dedicated_database()))
        else:
            var_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="mcp-bench-"))
            os.environ["MCPTASKS_VAR_DIR"] = var_dir
            os.environ.pop("DATABASE_URL", None)
        token, body = prepare(args.tokenless)
        port = free_port()
        env = {**os.environ, "BENCH_CONSTANT_BODY": body.decode()}
        child = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(port), "--server", args.server],
            env=env,
            cwd=ROOT,
        )
        stack.callback(child.wait, 10)
        stack.callback(child.terminate)
        for _ in range(200):
            if child.poll() is not None:
                raise SystemExit("the server exited before it was ready")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        expected = b'"tools":['
        results = {}
        for name, path in (
            ("const", "/const"),
            ("mcp", "/mcp"),
            ("const ", "/const"),
            ("mcp ", "/mcp"),
        ):
            # each endpoint twice, interleaved, so drift on a shared machine hits both
            results[name] = asyncio.run(
                load(port, path, token, args.seconds / 2, args.connections, child.pid, expected)
            )
    report(results, args, len(body))


def report(results: dict[str, dict[str, float]], args: argparse.Namespace, size: int) -> None:
    merged = {}
    for endpoint in ("const", "mcp"):
        first, second = results[endpoint], results[endpoint + " "]
        requests = first["requests"] + second["requests"]
        merged[endpoint] = {
            "rps": (first["rps"] + second["rps"]) / 2,
            "p50_ms": (first["p50_ms"] + second["p50_ms"]) / 2,
            "p99_ms": max(first["p99_ms"], second["p99_ms"]),
            "cpu_us": (
                first["server_cpu_us_per_request"] * first["requests"]
                + second["server_cpu_us_per_request"] * second["requests"]
            )
            / requests,
            "requests": requests,
        }
    const, mcp = merged["const"], merged["mcp"]
    print(
        f"server {args.server}, {args.connections} connections, {args.seconds:g} s per "
        f"endpoint, {'conformance principal' if args.tokenless else 'bearer token'}, "
        f"{'PostgreSQL' if args.pg else 'SQLite'}, {os.cpu_count()} CPUs, body {size} B"
    )
    print(f"{'endpoint':10} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'server CPU µs/req':>18}")
    for name, row in (("/const", const), ("/mcp", mcp)):
        print(
            f"{name:10} {row['rps']:9.0f} {row['p50_ms']:8.2f} {row['p99_ms']:8.2f} "
            f"{row['cpu_us']:18.0f}"
        )
    print(
        f"/mcp tools/list costs {mcp['cpu_us'] - const['cpu_us']:.0f} µs of server CPU per "
        f"request more than the constant endpoint; throughput {mcp['rps'] / const['rps']:.0%} "
        f"of it."
    )


if __name__ == "__main__":
    main()
