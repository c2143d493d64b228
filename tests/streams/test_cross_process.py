"""A change made in a Celery worker process reaches a listen stream held by a web process
(channels-redis), without waiting for the stream's database catch-up."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from django.db import connection

from tests.production.processes import private_redis
from tests.protocol.conftest import TASK_CAPS, VERSION
from tests.streams.conftest import free_port
from tests.streams.test_listen import SUB, listen_body

pytestmark = [
    pytest.mark.live,
    pytest.mark.pg,
    pytest.mark.redis,
    pytest.mark.django_db(transaction=True),
]
REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture
def web_and_worker(tmp_path):
    with private_redis(tmp_path) as redis:
        yield from _web_and_worker(tmp_path, redis.url(0))


def _web_and_worker(tmp_path, redis_url):
    settings_dict = connection.settings_dict
    database_url = (
        f"postgres://{settings_dict['USER']}@{settings_dict['HOST']}:"
        f"{settings_dict['PORT']}/{settings_dict['NAME']}"
    )
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,  # a private redis-server: two runs side by side never collide
        "MCPTASKS_VAR_DIR": str(tmp_path),
        "MCPTASKS_TOOL_PACKS": "mcptasks.tools.demo,tests.toolpack",
        # Only a broadcast can deliver within the test's bound.
        "MCPTASKS_STREAM_CATCH_UP_S": "120",
        "DJANGO_SETTINGS_MODULE": "mcptasks.settings",
    }
    port = free_port()
    logs = [open(tmp_path / name, "w") for name in ("web.log", "worker.log")]  # noqa: SIM115
    web = subprocess.Popen(
        [str(BIN / "python"), "manage.py", "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=logs[0],
        stderr=subprocess.STDOUT,
    )
    worker = subprocess.Popen(
        [str(BIN / "celery"), "-A", "mcptasks", "worker", "--pool=solo", "-l", "warning"],
        cwd=REPO,
        env=env,
        stdout=logs[1],
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or web.poll() is not None:
            raise RuntimeError((tmp_path / "web.log").read_text())
        time.sleep(0.2)
    yield url
    for process in (web, worker):
        process.terminate()
    for process in (web, worker):
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
    for log in logs:
        log.close()


def headers(token: str, method: str, name: str | None = None) -> dict[str, str]:
    result = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": VERSION,
        "mcp-method": method,
        "authorization": f"Bearer {token}",
    }
    if name:
        result["mcp-name"] = name
    return result


def meta() -> dict:
    return {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": TASK_CAPS,
    }


def test_worker_process_change_reaches_stream_on_web_process(web_and_worker, cast):
    url, token = web_and_worker, cast["alice"]["token"]

    async def go() -> tuple[list[dict], float]:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            created = (
                await client.post(
                    "/mcp",
                    headers=headers(token, "tools/call", "ask_twice"),
                    json={
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "tools/call",
                        "params": {"name": "ask_twice", "arguments": {}, "_meta": meta()},
                    },
                )
            ).json()
            task_id = created["result"]["taskId"]
            messages: list[dict] = []
            answered_at = 0.0
            async with client.stream(
                "POST",
                "/mcp",
                headers=headers(token, "subscriptions/listen"),
                json=listen_body(9, [task_id], TASK_CAPS),
            ) as stream:
                async for line in stream.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    message = json.loads(line[6:])
                    messages.append(message)
                    status = message.get("params", {}).get("status")
                    if status == "input_required" and not answered_at:
                        answered_at = time.monotonic()
                        reply = await client.post(
                            "/mcp",
                            headers=headers(token, "tasks/update", task_id),
                            json={
                                "jsonrpc": "2.0",
                                "id": 2,
                                "method": "tasks/update",
                                "params": {
                                    "taskId": task_id,
                                    "_meta": meta(),
                                    "inputResponses": {
                                        "name": {"action": "accept", "content": {"name": "N"}},
                                        "confirm": {
                                            "action": "accept",
                                            "content": {"confirm": True},
                                        },
                                    },
                                },
                            },
                        )
                        assert reply.json()["result"]["resultType"] == "complete"
                    if "result" in message:
                        break
            return messages, time.monotonic() - answered_at

    messages, elapsed = asyncio.run(asyncio.wait_for(go(), 60))
    statuses = [m["params"]["status"] for m in messages if m.get("method") == "notifications/tasks"]
    assert "input_required" in statuses
    assert statuses[-1] == "completed"
    assert messages[-1]["result"]["_meta"][SUB] == 9
    assert elapsed < 20  # far below the 120 s catch-up: delivered by broadcast
