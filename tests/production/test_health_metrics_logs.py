"""/healthz, /readyz (fails when its Redis is down), /metrics, and redacted structured logs."""

from __future__ import annotations

import io
import json
import logging
import shutil
import socket
import subprocess
import time

import pytest

from tests.audit.test_redaction import CORPUS, assert_no_secret


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.django_db
def test_healthz_and_readyz_on_the_embedded_default(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"]["database"] == "ok"


@pytest.mark.django_db
@pytest.mark.redis
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")
def test_readyz_fails_when_its_private_redis_stops(client, settings, tmp_path):
    port = free_port()
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        for _ in range(50):
            if (
                subprocess.run(
                    ["redis-cli", "-p", str(port), "ping"], capture_output=True
                ).returncode
                == 0
            ):
                break
            time.sleep(0.1)
        settings.MCPTASKS_EMBEDDED_WORKER = False
        settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{port}/0"
        settings.CHANNEL_REDIS_URL = f"redis://127.0.0.1:{port}/1"
        assert client.get("/readyz").status_code == 200
        server.terminate()
        server.wait(timeout=10)
        down = client.get("/readyz")
        assert down.status_code == 503
        assert down.json()["checks"]["broker"].startswith("unavailable")
    finally:
        if server.poll() is None:
            server.kill()


@pytest.mark.django_db
def test_metrics_expose_tasks_by_state_and_transitions(client, make_task):
    from mcptasks import runner

    task = make_task(tool_name="echo_task")
    runner.run_task(task.pk)
    body = client.get("/metrics").content.decode()
    assert 'mcptasks_tasks{state="completed"} 1.0' in body
    assert 'mcptasks_transitions_total{verb="complete"}' in body
    assert "mcptasks_reconciliation_backlog" in body
    assert "mcptasks_listen_streams" in body


# Cases whose secret is protected only by a tool's declared sensitive argument names are for
# the audit trail, which knows the tool; a log line does not.
LOG_CORPUS = [case for case in CORPUS if not case.sensitive_keys]


def test_structured_logs_never_carry_a_secret_of_the_corpus():
    from django.conf import settings

    from mcptasks.logging import formatter

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter("json"))
    logger = logging.getLogger("mcptasks.test.redaction")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        for case in LOG_CORPUS:
            logger.warning("payload %s", json.dumps(case.payload), extra={"payload": case.payload})
            try:
                raise RuntimeError(f"failed with {json.dumps(case.payload)}")
            except RuntimeError:
                logger.exception("tool crashed")
    finally:
        logger.removeHandler(handler)
    output = stream.getvalue()
    assert settings.LOG_FORMAT in ("json", "console")
    for line in output.splitlines():
        json.loads(line)
    assert len(LOG_CORPUS) >= 30
    for case in LOG_CORPUS:
        assert_no_secret(output, case.secrets)
