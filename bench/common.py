"""Helpers shared by the benchmarks: a throwaway PostgreSQL database, server processes, stats."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
RESULTS = REPO / "bench" / "results"
PG = "postgres://postgres@127.0.0.1:5432"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def uvicorn_argv(app: str, port: int, *, lifespan: str = "off", backlog: bool = True) -> list[str]:
    """A uvicorn server of ``app`` on 127.0.0.1:``port``, quiet."""
    argv = [
        str(BIN / "python"),
        "-m",
        "uvicorn",
        app,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--lifespan",
        lifespan,
        "--no-access-log",
        "--log-level",
        "warning",
    ]
    return [*argv, "--backlog", "4096"] if backlog else argv


def worker_argv(name: str, *extra: str) -> list[str]:
    """One Celery worker process as documented for production (docs/operations.md): the solo
    pool, so the process that takes a message from the broker runs it; run one per core."""
    argv = [str(BIN / "celery"), "-A", "mcptasks", "worker", "--pool=solo", *extra]
    return [*argv, "-n", f"{name}@%h", "-l", "warning"]


def stop_group(process: subprocess.Popen[bytes], timeout: float = 15) -> None:
    """SIGTERM to the process group of ``process`` (started with ``start_new_session``), then
    SIGKILL if it is still there after ``timeout`` seconds."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)


def process_stats() -> Iterator[tuple[int, list[str]]]:
    """Every live process as ``(pid, fields of /proc/<pid>/stat after the command name)``:
    [1] is the parent, [3] the session, [11] and [12] user and system CPU in clock ticks."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        yield int(entry.name), stat[stat.rfind(")") + 2 :].split()


def tree_cpu_s(pids: set[int]) -> float:
    """User + system CPU seconds so far of ``pids``, their children and their sessions."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid, fields in process_stats():
        if pid in pids or int(fields[1]) in pids or int(fields[3]) in pids:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One HTTP/1.1 response from ``reader``: status and body (Content-Length or chunked)."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length, chunked = 0, False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
        elif name.strip().lower() == b"transfer-encoding" and b"chunked" in value:
            chunked = True
    if not chunked:
        return status, await reader.readexactly(length)
    body = b""
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        chunk = await reader.readexactly(size + 2)
        if size == 0:
            return status, body
        body += chunk[:-2]


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def psql(sql: str) -> None:
    subprocess.run(
        ["psql", "-h", "127.0.0.1", "-U", "postgres", "-q", "-c", sql, "postgres"],
        check=True,
        capture_output=True,
    )


@contextmanager
def bench_database(name: str) -> Iterator[str]:
    """A fresh, migrated database; dropped afterwards. Yields its URL."""
    psql(f"DROP DATABASE IF EXISTS {name}")
    psql(f"CREATE DATABASE {name}")
    url = f"{PG}/{name}"
    try:
        subprocess.run(
            [str(BIN / "python"), "manage.py", "migrate", "-v0"],
            cwd=REPO,
            env=bench_env(url),
            check=True,
        )
        yield url
    finally:
        psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextmanager
def private_redis() -> Iterator[subprocess.Popen[bytes]]:
    """A ``redis-server`` of this run's own on a free port, nothing saved, named by
    ``BENCH_REDIS`` for this process and its children (so two runs side by side never share a
    queue or a bucket); stopped afterwards."""
    port = free_port()
    server = subprocess.Popen(
        [
            *("redis-server", "--bind", "127.0.0.1", "--port", str(port)),
            *("--save", "", "--appendonly", "no"),
        ],
        stdout=subprocess.DEVNULL,
    )
    previous = os.environ.get("BENCH_REDIS")
    os.environ["BENCH_REDIS"] = f"127.0.0.1:{port}"
    try:
        for _ in range(100):
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield server
    finally:
        if previous is None:
            os.environ.pop("BENCH_REDIS", None)
        else:
            os.environ["BENCH_REDIS"] = previous
        server.terminate()
        server.wait(timeout=10)


def bench_env(database_url: str, redis_db: int = 3, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": database_url,
        # BENCH_REDIS: another Redis server (host:port) so that parallel runs never share queues.
        "REDIS_URL": f"redis://{os.environ.get('BENCH_REDIS', '127.0.0.1:6379')}/{redis_db}",
        "SECRET_KEY": "bench-secret",
        "MCPTASKS_REQUEST_STATE_KEY": "bench",
        "MCPTASKS_AUDIT_SIGNING_KEY": "bench",
        "DJANGO_SETTINGS_MODULE": "mcptasks.settings",
        "MCPTASKS_TOOL_PACKS": "mcptasks.tools.demo,tests.toolpack",
        "SECURE_SSL_REDIRECT": "false",
        "LOG_LEVEL": "WARNING",
        "MCPTASKS_POLL_BURST": "1000000000",
        **extra,
    }


class Child:
    """A child process in its own session (so its workers go with it), output in ``log``."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path, name: str = "") -> None:
        self.name = name or log.stem
        self.log = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            argv,
            cwd=REPO,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 15) -> None:
        stop_group(self.process, timeout)
        self.log.close()


class Server(Child):
    """A web process under Daphne (``manage.py serve --server daphne``) or uvicorn (its CLI)."""

    def __init__(self, kind: str, env: dict[str, str], log: Path) -> None:
        self.kind, self.port = kind, free_port()
        if kind == "daphne":
            argv = [
                str(BIN / "python"),
                "manage.py",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--no-worker",
                "--server",
                "daphne",
            ]
        else:
            argv = uvicorn_argv("mcptasks.asgi:application", self.port)
        super().__init__(argv, env, log, kind)
        self.url = f"http://127.0.0.1:{self.port}"
        import httpx

        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"{kind} did not start; see {log}")
            time.sleep(0.2)

    def _status(self, field: str) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise KeyError(field)

    def rss_kib(self) -> int:
        return self._status("VmRSS")

    def threads(self) -> int:
        return self._status("Threads")

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))

    def version(self) -> str:
        import importlib.metadata

        return importlib.metadata.version(self.kind)
