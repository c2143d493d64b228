"""``manage.py serve`` as a real process, under its default server (uvicorn) and ``--server
daphne``: what it records as the client address, what its access log keeps, how it stops."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from audit.models import AuditEvent
from tests.live.conftest import ROOT, LiveServer, free_port, server_env, serving_process
from tests.live.test_embedded_servers import META

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]
SERVERS = ["uvicorn", "daphne"]


@contextmanager
def serve(tmp_path: Path, *options: str) -> Iterator[LiveServer]:
    port = free_port()
    python = ROOT / ".venv" / "bin" / "python"
    argv = [str(python if python.exists() else sys.executable), "manage.py", "serve"]
    argv += ["--host", "127.0.0.1", "--port", str(port), *options]
    env = {**server_env(), "LOG_LEVEL": "INFO", "LOG_FORMAT": "console"}
    env["SECURE_SSL_REDIRECT"] = "false"  # production (PostgreSQL) redirects plain HTTP to HTTPS
    with serving_process(argv, env, tmp_path / "serve.log", port) as server:
        yield server


def server_options(kind: str) -> list[str]:
    return [] if kind == "uvicorn" else ["--server", kind]


def test_serve_runs_uvicorn_unless_told_otherwise(tmp_path: Path, cast: dict) -> None:
    with serve(tmp_path) as server:
        assert "uvicorn" in server.log.read_text()
    with serve(tmp_path, "--server", "daphne") as server:
        log = server.log.read_text()
        assert "(MCP endpoint /mcp; daphne)" in log and "uvicorn" not in log


@pytest.mark.parametrize("kind", SERVERS)
def test_a_forwarded_for_the_client_sent_does_not_change_the_recorded_address(
    tmp_path: Path, cast: dict, kind: str
) -> None:
    with serve(tmp_path, *server_options(kind)) as server:
        page = httpx.get(f"{server.url}/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert token, page.text[:500]
        # sent by hand: in production the CSRF cookie is Secure, and this is plain HTTP
        cookie = page.cookies["csrftoken"]
        response = httpx.post(
            f"{server.url}/login/",
            data={"username": "alice", "password": "wrong", "csrfmiddlewaretoken": token[1]},
            headers={
                "Cookie": f"csrftoken={cookie}",
                "X-Forwarded-For": "203.0.113.9",
                "X-Real-IP": "203.0.113.9",
            },
        )
        assert response.status_code == 200, response.text[:500]
    (event,) = AuditEvent.objects.filter(action="auth.login_failed")
    # The socket's peer: no trusted proxy is configured, so the header is not believed, and the
    # server did not rewrite the address from it either.
    assert event.data["ip"] == "127.0.0.1"


@pytest.mark.parametrize("kind", SERVERS)
def test_the_access_log_of_serve_keeps_no_query_string_secret(
    tmp_path: Path, cast: dict, kind: str
) -> None:
    secret = "mcpt_0123456789ab_Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA"
    with serve(tmp_path, *server_options(kind)) as server:
        assert httpx.get(f"{server.url}/healthz?access_token={secret}&page=2").status_code == 200
        deadline = time.monotonic() + 5
        while "/healthz?" not in server.log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        log = server.log.read_text()
    line = next(line for line in log.splitlines() if "/healthz?" in line)
    assert "access_token=[REDACTED]&page=2" in line and " 200" in line
    assert secret not in log and "Zm9vYmFy" not in log


def test_serve_finishes_a_request_in_flight_on_sigterm_then_exits(
    tmp_path: Path, cast: dict
) -> None:
    token = cast["alice"]["token"]
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": META}}
    ).encode()
    with serve(tmp_path) as server:
        port = int(server.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            head = (
                f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
                "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/list\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            )
            sock.sendall(head.encode() + body[:10])  # the request has begun, its body has not
            time.sleep(0.5)
            os.killpg(server.process.pid, signal.SIGTERM)
            time.sleep(0.5)
            assert server.process.poll() is None  # waiting for the request in flight
            sock.sendall(body[10:])
            answer = b""
            while b"\r\n\r\n" not in answer:
                chunk = sock.recv(65536)
                assert chunk, answer
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
        # no new connection is accepted while it shuts down, and it ends by itself, cleanly
        assert server.process.wait(timeout=15) == 0, server.log_tail()
    log = server.log.read_text()
    assert "Shutting down" in log and "Traceback" not in log
