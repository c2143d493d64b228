"""Start what docker-compose would, from the same settings: web processes, Celery workers and
beat, on PostgreSQL and Redis. Every process is ended by pid."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.faults.harness import PrivateRedis

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def private_redis(workdir: Path) -> Iterator[PrivateRedis]:
    """A redis-server of the caller's own on a free port, stopped (by pid) after.

    The multi-process tests give their processes this, never fixed databases of a shared Redis,
    so that two test runs side by side never read each other's messages or flush each other's
    data; ``url(n)`` is its database ``n``."""
    server = PrivateRedis(workdir)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def database_url(settings_dict: dict) -> str:
    user = settings_dict.get("USER") or "postgres"
    return (
        f"postgres://{user}@{settings_dict.get('HOST') or '127.0.0.1'}:"
        f"{settings_dict.get('PORT') or 5432}/{settings_dict['NAME']}"
    )


def stack_env(workdir: Path, database_url: str, redis_url: str) -> dict[str, str]:
    """The environment of a stack's processes: this one's, on ``database_url`` and a private
    ``redis_url`` (broker 0, channels 1, limits 2), short leases and sweeps, metrics and keys
    under ``workdir``."""
    metrics_dir = workdir / "prometheus"
    metrics_dir.mkdir(exist_ok=True)
    return {
        **os.environ,
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "SECRET_KEY": os.environ.get("SECRET_KEY", "stack-test-secret"),
        "MCPTASKS_REQUEST_STATE_KEY": "stack-test",
        "MCPTASKS_AUDIT_SIGNING_KEY": "x",
        "MCPTASKS_VAR_DIR": str(workdir),
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
        "MCPTASKS_TOOL_PACKS": "mcptasks.tools.demo,tests.toolpack",
        "MCPTASKS_LEASE_S": "3",
        "MCPTASKS_SWEEP_INTERVAL_S": "0.5",
        "SECURE_SSL_REDIRECT": "false",
        "DJANGO_SETTINGS_MODULE": "mcptasks.settings",
    }


@dataclass
class Stack:
    env: dict[str, str]
    workdir: Path
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    web_urls: dict[str, str] = field(default_factory=dict)

    def _start(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.workdir / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
        process = subprocess.Popen(
            argv,
            cwd=REPO,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes[name] = process
        return process

    def web(self, name: str) -> str:
        port = free_port()
        self._start(
            name,
            [str(BIN / "python"), "manage.py", "serve", "--host", "127.0.0.1", "--port", str(port)],
        )
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or self.processes[name].poll() is not None:
                raise RuntimeError(f"{name} did not become ready:\n{self.log(name)}")
            time.sleep(0.2)
        self.web_urls[name] = url
        return url

    def worker(self, name: str) -> None:
        self._start(
            name,
            [
                str(BIN / "celery"),
                "-A",
                "mcptasks",
                "worker",
                "--pool=solo",  # as docker-compose.yml runs them
                "-n",
                f"{name}@%h",
                "-l",
                "warning",
            ],
        )

    def beat(self) -> None:
        self._start(
            "beat",
            [
                str(BIN / "celery"),
                "-A",
                "mcptasks",
                "beat",
                "-l",
                "warning",
                "-s",
                str(self.workdir / "beat-schedule"),
            ],
        )

    def kill(self, name: str) -> None:
        """SIGKILL the process and its children (a worker's pool)."""
        process = self.processes[name]
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text()

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


@contextmanager
def running_stack(
    env: dict[str, str], workdir: Path, webs: tuple[str, ...], workers: tuple[str, ...]
) -> Iterator[Stack]:
    """The web processes and Celery workers named, and beat; all stopped after."""
    stack = Stack(env=env, workdir=workdir)
    try:
        for name in webs:
            stack.web(name)
        for name in workers:
            stack.worker(name)
        stack.beat()
        yield stack
    finally:
        stack.stop()
