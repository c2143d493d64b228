"""The embedded default as a new user runs it: a fresh ``var/`` directory, the demo seeded, and
a real server process (``manage.py serve``, uvicorn or daphne) with none of the test run's
service variables, so it is SQLite and the in-process worker whatever CI sets."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.live.conftest import ROOT, LiveServer, free_port, serving_process

BIN = (ROOT / ".venv" / "bin") if (ROOT / ".venv" / "bin" / "python").exists() else None
# The product's own variables, withheld: the server must boot with no variables (embedded).
PRODUCT_PREFIXES = ("MCPTASKS_", "DATABASE_", "REDIS_", "CELERY_", "CHANNEL_", "SQLITE_")
PRODUCT_NAMES = {"SECRET_KEY", "DEBUG", "ALLOWED_HOSTS", "LOG_FORMAT", "PROMETHEUS_MULTIPROC_DIR"}
TOKEN_LINE = re.compile(r"^\s+(\w+)\s+password \S+\s+token (mcpt_\S+)$", re.MULTILINE)


def executable(name: str) -> str:
    return str(BIN / name) if BIN is not None else str(Path(sys.executable).parent / name)


def embedded_env(var_dir: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(PRODUCT_PREFIXES) and key not in PRODUCT_NAMES
    }
    env.update(
        {
            "MCPTASKS_VAR_DIR": str(var_dir),
            "DJANGO_SETTINGS_MODULE": "mcptasks.settings",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def seed(var_dir: Path) -> dict[str, str]:
    """Migrate and seed a fresh embedded default in ``var_dir``; return the cast's MCP tokens."""
    env = embedded_env(var_dir)
    python = executable("python")
    subprocess.run(
        [python, "manage.py", "migrate", "--no-input", "-v0"], cwd=ROOT, env=env, check=True
    )
    output = subprocess.run(
        [python, "manage.py", "seed_demo"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    tokens = dict(TOKEN_LINE.findall(output))
    assert {"alice", "olga"} <= set(tokens), output
    return tokens


SERVERS = {
    "serve": lambda port: [executable("python"), "manage.py", "serve", "--port", str(port)],
    "uvicorn": lambda port: [
        executable("uvicorn"),
        "mcptasks.asgi:application",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ],
    "daphne": lambda port: [
        executable("daphne"),
        "-b",
        "127.0.0.1",
        "-p",
        str(port),
        "mcptasks.asgi:application",
    ],
}


@contextmanager
def running(kind: str, var_dir: Path) -> Iterator[LiveServer]:
    """``kind`` (a key of SERVERS) serving the embedded default of ``var_dir``."""
    port = free_port()
    log = var_dir / f"{kind}-{port}.log"
    with serving_process(SERVERS[kind](port), embedded_env(var_dir), log, port) as server:
        yield server
