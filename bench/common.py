"""Helpers shared by the benchmarks: a throwaway PostgreSQL database, server processes, stats."""

from __future__ import annotations

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


class Server:
    """A web process under Daphne or uvicorn."""

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
            ]
        else:
            argv = [
                str(BIN / "python"),
                "-m",
                "uvicorn",
                "mcptasks.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--lifespan",
                "off",
                "--no-access-log",
                "--log-level",
                "warning",
                "--backlog",
                "4096",
            ]
        self.log = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            argv,
            cwd=REPO,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
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

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
        self.log.close()
