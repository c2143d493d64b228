"""The production path as documented: docs/operations.md "Deploy without Docker" run as written.

The block between the ``production-steps`` markers is run by bash, unchanged except for the
listen address (``--host 0.0.0.0 --port 8000`` becomes loopback and a free port), with the
settings of ``mcptasks.env.example`` (fresh keys in place of ``change-me``) on a PostgreSQL
database of its own (a non-superuser owner, and the application role the block creates) and a
redis-server of its own: migrate, collectstatic, then web, a Celery worker and beat as separate
processes, ``DEBUG`` off and ``SECURE_SSL_REDIRECT`` on. Requests come as the TLS-terminating
proxy sends them (``Host`` of ``ALLOWED_HOSTS``, ``X-Forwarded-Proto: https``). Checked: the
compose web healthcheck passes against it; plain HTTP is redirected to https; the dashboard's
static files are served; a task created over MCP completes (its timer woken by beat's sweep, so
beat must run); the app role wrote its audit rows and cannot truncate them; beat's schedule
file lands under ``MCPTASKS_VAR_DIR``, not in the repository.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import psycopg
import pytest
import yaml

from tests.production.processes import free_port, private_redis
from tests.protocol.conftest import TASK_CAPS, VERSION

pytestmark = [pytest.mark.live, pytest.mark.pg, pytest.mark.redis]
REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
STEPS = re.compile(
    r"<!-- production-steps: begin -->\s*```bash\n(.*?)```\s*<!-- production-steps: end -->", re.S
)
LISTEN = "--host 0.0.0.0 --port 8000"


def documented_steps() -> str:
    found = STEPS.findall((REPO / "docs" / "operations.md").read_text())
    assert len(found) == 1, "docs/operations.md must hold exactly one production-steps block"
    assert found[0].count(LISTEN) == 1, f"the block's web command must listen with {LISTEN!r}"
    return str(found[0])


def example_settings() -> dict[str, str]:
    """mcptasks.env.example's active settings, with fresh keys where it says change-me."""
    settings = {}
    for line in (REPO / "mcptasks.env.example").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            settings[name] = secrets.token_urlsafe(48) if value == "change-me" else value
    return settings


@dataclass
class Deployment:
    url: str
    port: int
    host: str
    env: dict[str, str]
    owner_url: str
    app_url: str
    app_role: str
    var_dir: Path
    log: Path

    def get(self, path: str, *, proxied: bool = True, **kwargs: Any) -> httpx.Response:
        headers = {"host": self.host, **({"x-forwarded-proto": "https"} if proxied else {})}
        return httpx.get(f"{self.url}{path}", headers=headers, timeout=10, **kwargs)

    def mcp(self, token: str, method: str, params: dict[str, Any], name: str) -> dict[str, Any]:
        response = httpx.post(
            f"{self.url}/mcp",
            headers={
                "host": self.host,
                "x-forwarded-proto": "https",
                "authorization": f"Bearer {token}",
                "content-type": "application/json",
                "accept": "application/json, text/event-stream",
                "mcp-protocol-version": VERSION,
                "mcp-method": method,
                "mcp-name": name,
            },
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": method,
                "params": {
                    **params,
                    "_meta": {
                        "io.modelcontextprotocol/protocolVersion": VERSION,
                        "io.modelcontextprotocol/clientCapabilities": TASK_CAPS,
                    },
                },
            },
            timeout=15,
        )
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]


def _admin(server_url: str, sql: str, params: Any = None) -> None:
    with psycopg.connect(server_url, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
        conn.execute(sql, params)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp("production-path")
    admin = urlparse(os.environ["DATABASE_URL"])  # a superuser of the test server
    server_url = admin._replace(path="/postgres").geturl()
    tag = f"{os.getpid()}"
    database = f"{admin.path.strip('/')}_path_{tag}"
    owner, owner_password = f"mcptasks_owner_path_{tag}", secrets.token_urlsafe(18)
    app_role, app_password = f"mcptasks_app_path_{tag}", secrets.token_urlsafe(18)
    netloc = f"{admin.hostname or '127.0.0.1'}:{admin.port or 5432}"
    owner_url = f"postgres://{owner}:{owner_password}@{netloc}/{database}"
    app_url = f"postgres://{app_role}:{app_password}@{netloc}/{database}"
    _admin(server_url, f"CREATE ROLE {owner} LOGIN PASSWORD %s", [owner_password])
    _admin(server_url, f"CREATE DATABASE {database} OWNER {owner}")
    port = free_port()
    log = tmp / "deployment.log"
    var_dir = tmp / "var"
    settings = example_settings()
    process: subprocess.Popen[bytes] | None = None
    try:
        with private_redis(tmp) as redis, open(log, "wb") as out:
            env = {
                "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                "HOME": os.environ.get("HOME", str(tmp)),
                "LANG": "C.UTF-8",
                **settings,
                "REDIS_URL": redis.url(0),
                "OWNER_DATABASE_URL": owner_url,
                "APP_DATABASE_URL": app_url,
                "MCPTASKS_DB_APP_ROLE": app_role,
                "POSTGRES_APP_PASSWORD": app_password,
                "POSTGRES_USER": admin.username or "postgres",
                "POSTGRES_DB": database,
                "PGHOST": admin.hostname or "127.0.0.1",
                "PGPORT": str(admin.port or 5432),
                "MCPTASKS_VAR_DIR": str(var_dir),
                # Timers are woken only by beat's due-timer sweep, so a completed task proves beat.
                "MCPTASKS_TIMER_ETA_MAX_S": "-1",
                "MCPTASKS_SWEEP_INTERVAL_S": "0.5",
            }
            script = documented_steps().replace(LISTEN, f"--host 127.0.0.1 --port {port}")
            process = subprocess.Popen(
                ["bash", "-euo", "pipefail", "-c", script],
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            deployment = Deployment(
                url=f"http://127.0.0.1:{port}",
                port=port,
                host=settings["ALLOWED_HOSTS"].split(",")[0],
                env=env,
                owner_url=owner_url,
                app_url=app_url,
                app_role=app_role,
                var_dir=var_dir,
                log=log,
            )
            _wait_ready(deployment, process)
            yield deployment
    finally:
        if process is not None:
            _stop_group(process.pid)
        _admin(server_url, f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        _admin(server_url, f"DROP ROLE IF EXISTS {app_role}")
        _admin(server_url, f"DROP ROLE IF EXISTS {owner}")


def _wait_ready(deployment: Deployment, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        code = process.poll()
        if code not in (None, 0):
            raise AssertionError(
                f"the documented steps failed ({code}):\n{deployment.log.read_text()}"
            )
        try:
            if deployment.get("/readyz").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"/readyz never answered 200:\n{deployment.log.read_text()}")


def _stop_group(pgid: int) -> None:
    """End the processes the block started: its session's process group, by its id."""
    for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)


def test_the_compose_web_healthcheck_passes_with_the_example_settings(deployment):
    test = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]["web"][
        "healthcheck"
    ]["test"]
    assert test[:3] == ["CMD", "python", "scripts/healthcheck.py"] and test[3] == "8000"
    argv = [sys.executable, test[2], str(deployment.port)]
    result = subprocess.run(argv, cwd=REPO, env=deployment.env, capture_output=True, timeout=30)
    assert result.returncode == 0, result.stderr
    # What the old healthcheck did (Host 127.0.0.1, not in ALLOWED_HOSTS) is refused.
    plain = httpx.get(f"{deployment.url}/readyz", timeout=10)
    assert plain.status_code == 400
    ready = deployment.get("/readyz").json()
    assert ready["status"] == "ready"
    assert set(ready["checks"]) == {"database", "broker", "channel_layer"}


def test_debug_is_off_plain_http_is_redirected_and_the_proxy_case_is_served(deployment):
    redirected = deployment.get("/login/", proxied=False)
    assert redirected.status_code == 301
    assert redirected.headers["location"] == f"https://{deployment.host}/login/"
    page = deployment.get("/login/")
    assert page.status_code == 200
    assert "strict-transport-security" in page.headers  # sent only with DEBUG off
    missing = deployment.get("/no-such-page/")
    assert missing.status_code == 404
    assert "URLconf" not in missing.text  # not Django's debug page


def test_the_dashboard_static_files_are_served(deployment):
    page = deployment.get("/login/")
    assets = sorted(set(re.findall(r"""(?:href|src)="(/static/[^"]+)\"""", page.text)))
    assert {"/static/dashboard/app.css", "/static/dashboard/app.js"} <= set(assets), assets
    for asset in assets:
        response = deployment.get(asset)
        assert response.status_code == 200, asset
        assert response.content == (REPO / asset.removeprefix("/")).read_bytes(), asset
    assert (deployment.var_dir / "static" / "dashboard" / "app.css").is_file()


def test_a_task_created_over_mcp_is_run_by_the_worker_and_woken_by_beat(deployment):
    seed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, django; django.setup()\n"
            "from mcptasks.management.commands.seed_demo import seed_cast\n"
            "print(json.dumps(seed_cast()['alice']['token']))",
        ],
        cwd=REPO,
        env={
            **deployment.env,
            "DATABASE_URL": deployment.app_url,
            "DJANGO_SETTINGS_MODULE": "mcptasks.settings",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert seed.returncode == 0, seed.stderr
    token = json.loads(seed.stdout.strip().splitlines()[-1])
    created = deployment.mcp(
        token,
        "tools/call",
        {"name": "run_pipeline", "arguments": {"pipeline": "p", "stages": 2, "stage_seconds": 0.5}},
        "run_pipeline",
    )
    task_id = created["result"]["taskId"]
    deadline, status = time.monotonic() + 90, ""
    while time.monotonic() < deadline and status != "completed":
        reply = deployment.mcp(token, "tasks/get", {"taskId": task_id}, task_id)
        status = reply["result"]["status"]
        assert status != "failed", reply
        time.sleep(0.5)
    assert status == "completed", deployment.log.read_text()[-4000:]
    with psycopg.connect(deployment.owner_url) as conn:
        actions = [
            row[0]
            for row in conn.execute(
                "SELECT action FROM audit_auditevent WHERE task_id = %s ORDER BY seq", [task_id]
            )
        ]
        tables_owner = conn.execute(
            "SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'public'"
        ).fetchall()
    assert actions[0] == "task.created" and actions[-1] == "task.completed", actions
    assert actions.count("task.sleeping") == 2, actions
    assert tables_owner == [(urlparse(deployment.owner_url).username,)]
    with (
        psycopg.connect(deployment.app_url) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute("TRUNCATE audit_auditevent")


def test_beat_keeps_its_schedule_under_the_var_dir(deployment):
    assert list(deployment.var_dir.glob("celerybeat-schedule*"))
    assert not list(REPO.glob("celerybeat-schedule*"))
