"""The compose topology without Docker: two web processes, two Celery workers and beat on
PostgreSQL + Redis. Nothing is lost when one web process and one worker die mid-run."""

from __future__ import annotations

import asyncio
import json
import re
import time

import httpx
import pytest
from django.db import connection

from mcptasks.models import Task, TaskState
from tests.production.processes import database_url, private_redis, running_stack, stack_env
from tests.protocol.conftest import TASK_CAPS, VERSION

pytestmark = [
    pytest.mark.live,
    pytest.mark.pg,
    pytest.mark.redis,
    pytest.mark.django_db(transaction=True),
]
META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": TASK_CAPS,
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory, django_db_setup):
    tmp_path = tmp_path_factory.mktemp("stack")
    with private_redis(tmp_path) as redis:
        yield from _stack(tmp_path, redis.url(0))


def _stack(tmp_path, redis_url):
    env = stack_env(tmp_path, database_url(connection.settings_dict), redis_url)
    with running_stack(env, tmp_path, ("web1", "web2"), ("worker1", "worker2")) as stack:
        yield stack


def post(
    url: str, token: str, method: str, params: dict, request_id: int = 1, name: str | None = None
) -> dict:
    headers = {
        "content-type": "application/json",
        "accept": "application/json",
        "mcp-protocol-version": VERSION,
        "mcp-method": method,
        "authorization": f"Bearer {token}",
    }
    if name:
        headers["mcp-name"] = name
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": method,
        "params": {**params, "_meta": META},
    }
    response = httpx.post(f"{url}/mcp", json=body, headers=headers, timeout=15)
    return response.json()


def create(url: str, token: str, tool: str, arguments: dict) -> str:
    reply = post(url, token, "tools/call", {"name": tool, "arguments": arguments}, name=tool)
    return reply["result"]["taskId"]


def wait_terminal(url: str, token: str, task_ids: list[str], timeout: float) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        for task_id in task_ids:
            if states.get(task_id) in ("completed", "failed", "cancelled"):
                continue
            reply = post(url, token, "tasks/get", {"taskId": task_id}, name=task_id)
            if "result" in reply:
                states[task_id] = reply["result"]["status"]
        if all(states.get(t) in ("completed", "failed", "cancelled") for t in task_ids):
            return states
        time.sleep(0.3)
    return states


def test_tasks_created_on_one_web_process_are_served_by_the_other(stack, cast):
    token = cast["alice"]["token"]
    web1, web2 = stack.web_urls["web1"], stack.web_urls["web2"]
    task_ids = [create(web1, token, "echo_task", {"text": f"n{n}"}) for n in range(10)]
    states = wait_terminal(web2, token, task_ids, timeout=60)
    assert states == dict.fromkeys(task_ids, "completed")
    from audit.models import AuditEvent

    # Run by worker processes (the web processes run no worker when REDIS_URL is set).
    runners = set(
        AuditEvent.objects.filter(task_id__in=task_ids, action="task.started").values_list(
            "actor_display", flat=True
        )
    )
    web_pids = {str(stack.processes[name].pid) for name in ("web1", "web2")}
    assert runners and not {r.split(":")[1] for r in runners} & web_pids
    for url in (web1, web2):
        metrics = httpx.get(f"{url}/metrics", timeout=10).text
        completed = re.search(r'^mcptasks_tasks\{state="completed"\} (\S+)$', metrics, re.M)
        assert completed and float(completed.group(1)) >= 10


def test_listen_on_web2_sees_a_task_created_through_web1(stack, cast):
    token = cast["alice"]["token"]
    web1, web2 = stack.web_urls["web1"], stack.web_urls["web2"]
    task_id = create(
        web1, token, "run_pipeline", {"pipeline": "p", "stages": 2, "stage_seconds": 0.5}
    )

    async def listen() -> list[dict]:
        headers = {
            "content-type": "application/json",
            "accept": "text/event-stream",
            "mcp-protocol-version": VERSION,
            "mcp-method": "subscriptions/listen",
            "authorization": f"Bearer {token}",
        }
        body = {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "subscriptions/listen",
            "params": {"notifications": {"taskIds": [task_id]}, "_meta": META},
        }
        messages = []
        async with (
            httpx.AsyncClient(timeout=60) as client,
            client.stream("POST", f"{web2}/mcp", json=body, headers=headers) as response,
        ):
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    messages.append(json.loads(line[6:]))
                    if "result" in messages[-1]:
                        break
        return messages

    messages = asyncio.run(asyncio.wait_for(listen(), 60))
    statuses = [m["params"]["status"] for m in messages if m.get("method") == "notifications/tasks"]
    assert statuses[-1] == "completed"
    assert messages[0]["params"]["notifications"]["taskIds"] == [task_id]


def test_killing_a_web_process_and_a_worker_mid_run_loses_nothing(stack, cast):
    token = cast["alice"]["token"]
    web1, web2 = stack.web_urls["web1"], stack.web_urls["web2"]
    task_ids = [
        create(
            web1, token, "run_pipeline", {"pipeline": f"p{n}", "stages": 3, "stage_seconds": 0.5}
        )
        for n in range(20)
    ]
    time.sleep(1.0)
    stack.kill("worker1")
    stack.kill("web1")
    states = wait_terminal(web2, token, task_ids, timeout=90)
    assert states == dict.fromkeys(task_ids, "completed"), states
    assert Task.objects.filter(pk__in=task_ids, state=TaskState.COMPLETED).count() == 20
    from audit.models import AuditEvent

    for task_id in task_ids:
        actions = list(
            AuditEvent.objects.filter(task_id=task_id)
            .order_by("chain", "seq")
            .values_list("action", flat=True)
        )
        assert actions[0] == "task.created" and actions[-1] == "task.completed"
