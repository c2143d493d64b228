"""A real server subprocess (``manage.py serve``) on the test database, for real MCP clients.

Runs only with MCPTASKS_LIVE_TESTS=1 (marker ``live``). The server uses its in-process worker
thread, also on PostgreSQL: REDIS_URL is never passed to it. Tests use
``django_db(transaction=True)`` so the server sees the rows they commit (the cast's tokens).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL_PACKS = "mcptasks.tools.demo,tests.toolpack"
# Never handed to the server: it must run its own worker thread, not publish to Celery.
WITHHELD = (
    "REDIS_URL",
    "CELERY_BROKER_URL",
    "CHANNEL_REDIS_URL",
    "MCPTASKS_CONFORMANCE_MODE",
    "SQLITE_PATH",
    "DATABASE_URL",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env() -> dict[str, str]:
    """The test run's environment pointed at the test database, with the same keys."""
    from django.conf import settings
    from django.db import connection

    env = {key: value for key, value in os.environ.items() if key not in WITHHELD}
    test_db = str(connection.settings_dict["NAME"])
    if os.environ.get("DATABASE_URL"):
        url = urlparse(os.environ["DATABASE_URL"])
        env["DATABASE_URL"] = urlunparse(url._replace(path="/" + test_db))
    else:
        env["SQLITE_PATH"] = test_db
    env.update(
        {
            "SECRET_KEY": settings.SECRET_KEY,
            "MCPTASKS_REQUEST_STATE_KEY": settings.REQUEST_STATE_KEY,
            "MCPTASKS_AUDIT_SIGNING_KEY": settings.AUDIT_SIGNING_KEY,
            "MCPTASKS_TOOL_PACKS": TOOL_PACKS,
            "MCPTASKS_CONFORMANCE_MODE": "false",
            "DJANGO_SETTINGS_MODULE": "mcptasks.settings",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


class LiveServer:
    def __init__(self, url: str, process: subprocess.Popen[bytes], log: Path) -> None:
        self.url, self.process, self.log = url, process, log

    @property
    def mcp_url(self) -> str:
        return f"{self.url}/mcp"

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def wait_until_healthy(server: LiveServer, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            pytest.fail(
                f"the server exited with {server.process.returncode}:\n{server.log_tail()}",
                pytrace=False,
            )
        try:
            if httpx.get(f"{server.url}/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    pytest.fail(f"the server did not become healthy:\n{server.log_tail()}", pytrace=False)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop the server this fixture started (its own process group), by its id."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@contextmanager
def serving_process(
    argv: list[str], env: dict[str, str], log: Path, port: int
) -> Iterator[LiveServer]:
    """Start ``argv`` (a server on ``port``) in its own process group, logging to ``log``; yield
    it once healthy; stop it by its id."""
    with log.open("wb") as output:
        process = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = LiveServer(f"http://127.0.0.1:{port}", process, log)
    try:
        wait_until_healthy(server)
        yield server
    finally:
        stop(process)


@pytest.fixture(scope="module")
def mcp_server_process(
    django_db_setup: Any, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[LiveServer]:
    """``manage.py serve`` on a free port against the test database; killed at teardown.

    A test module may set ``SERVER_ENV`` (a dict) to configure its server.
    """
    port = free_port()
    env = {**server_env(), **getattr(request.module, "SERVER_ENV", {})}
    log = tmp_path_factory.mktemp("live") / "server.log"
    python = ROOT / ".venv" / "bin" / "python"
    argv = [str(python if python.exists() else sys.executable), "manage.py", "serve"]
    with serving_process(
        [*argv, "--host", "127.0.0.1", "--port", str(port)], env, log, port
    ) as server:
        yield server


@pytest.fixture(scope="session")
def embedded_demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A fresh embedded default (its own var/ directory), migrated and seeded with the demo:
    the directory and the cast's MCP tokens (tests.live.embedded_demo)."""
    from tests.live.embedded_demo import seed

    var_dir = tmp_path_factory.mktemp("embedded-var")
    return var_dir, seed(var_dir)


@pytest.fixture
def alice_token(cast: dict[str, dict[str, Any]]) -> str:
    return str(cast["alice"]["token"])


@pytest.fixture
def server(mcp_server_process: LiveServer, request: pytest.FixtureRequest) -> Iterator[LiveServer]:
    """The live server, with its log tail shown when the test fails."""
    yield mcp_server_process
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        sys.stderr.write(f"\n--- server log ---\n{mcp_server_process.log_tail()}\n")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.rep_call = report  # type: ignore[attr-defined]
    return report
