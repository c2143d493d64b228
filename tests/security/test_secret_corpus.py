"""The secret-corpus test of the whole product (issue 19): a live web process and a Celery
worker on PostgreSQL + Redis; tools receive a seeded corpus of secrets (tests/security/corpus.py)
in their arguments, their answers, and put them in status messages, questions, tool errors,
tracebacks, stdout and results. Then every sink is searched for every secret: both processes'
logs (with the access log), every audit row, a JSONL and a CSV export, every dashboard page and
WebSocket frame an operator and an auditor see, and the REST and MCP answers (``tasks/get``,
``subscriptions/listen``) they get. Zero hits — while the owner's own ``tasks/get`` shows every
secret, so the secrets really went through.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from django.db import connection

from audit.models import AuditEvent
from mcptasks.models import ApiToken
from tests.production.processes import Stack, database_url
from tests.production.test_scale_out import META, create, post
from tests.protocol.conftest import VERSION
from tests.security import corpus

pytestmark = [pytest.mark.live, pytest.mark.pg, pytest.mark.redis]
pytestmark.append(pytest.mark.django_db(transaction=True))
VIEWERS = ("olga", "carl")  # an operator and an auditor of acme; alice owns the tasks
TERMINAL = ("completed", "failed", "cancelled")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, django_db_setup: Any) -> Any:
    workdir = tmp_path_factory.mktemp("corpus")
    metrics_dir = workdir / "prometheus"
    metrics_dir.mkdir()
    env = {
        **os.environ,
        "DATABASE_URL": database_url(connection.settings_dict),
        "REDIS_URL": os.environ["REDIS_URL"],  # the run's own Redis databases
        "MCPTASKS_VAR_DIR": str(workdir),
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
        "MCPTASKS_TOOL_PACKS": "mcptasks.tools.demo,tests.security.corpus_pack",
        "MCPTASKS_CONFORMANCE_MODE": "false",
        "SECURE_SSL_REDIRECT": "false",
        "LOG_LEVEL": "INFO",
        "PYTHONUNBUFFERED": "1",
        "DJANGO_SETTINGS_MODULE": "mcptasks.settings",
    }
    stack = Stack(env=env, workdir=workdir)
    try:
        stack.web("web")
        stack.worker("worker")
        yield stack
    finally:
        stack.stop()


# ---------------------------------------------------------------- clients
# MCP over HTTP as tests/production/test_scale_out.py speaks it (post returns the JSON reply).
def tasks_get(url: str, token: str, task_id: str) -> Any:
    return post(url, token, "tasks/get", {"taskId": task_id}, name=task_id)


def wait_for(url: str, token: str, task_ids: list[str], statuses: tuple[str, ...]) -> dict:
    deadline = time.monotonic() + 90
    found: dict[str, str] = {}
    while time.monotonic() < deadline:
        for task_id in task_ids:
            reply = tasks_get(url, token, task_id)
            found[task_id] = reply.get("result", {}).get("status", "")
        if all(status in statuses for status in found.values()):
            return found
        time.sleep(0.3)
    pytest.fail(f"tasks did not reach {statuses}: {found}")


@dataclass
class Viewer:
    """A non-owner: a token for MCP and REST, and a dashboard session."""

    name: str
    token: str
    session: str

    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"}

    def cookies(self) -> dict[str, str]:
        return {"sessionid": self.session}


def viewer(cast: dict[str, Any], name: str) -> Viewer:
    from django.test import Client

    entry = cast[name]
    _, token = ApiToken.issue(
        user=entry["user"], tenant=entry["tenant"], name="corpus", scopes=["mcp", "api"]
    )
    client = Client()
    client.force_login(entry["user"])
    return Viewer(name, token, client.cookies["sessionid"].value)


class SocketRecorder(threading.Thread):
    """Every frame the dashboard's WebSocket sends one session, until stopped."""

    def __init__(self, url: str, session: str) -> None:
        super().__init__(daemon=True)
        self.url, self.session = url, session
        self.frames: list[str] = []
        self.error: BaseException | None = None
        self.ready, self.stopping = threading.Event(), threading.Event()

    def run(self) -> None:
        try:
            asyncio.run(self._record())
        except BaseException as exc:  # reported by the test
            self.error = exc
            self.ready.set()

    async def _record(self) -> None:
        from websockets.asyncio.client import connect

        async with connect(
            self.url.replace("http://", "ws://") + "/ws/tasks",
            additional_headers={"Cookie": f"sessionid={self.session}", "Origin": self.url},
        ) as socket:
            self.ready.set()
            while not self.stopping.is_set():
                try:
                    frame = await asyncio.wait_for(socket.recv(), 0.3)
                except TimeoutError:
                    continue
                self.frames.append(str(frame))


class ListenRecorder(threading.Thread):
    """Every SSE message of a viewer's ``subscriptions/listen`` on the tasks, until it ends."""

    def __init__(self, url: str, token: str, task_ids: list[str]) -> None:
        super().__init__(daemon=True)
        self.url, self.token, self.task_ids = url, token, task_ids
        self.messages: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        headers = {
            "accept": "text/event-stream",
            "mcp-protocol-version": VERSION,
            "mcp-method": "subscriptions/listen",
            "authorization": f"Bearer {self.token}",
        }
        body = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "subscriptions/listen",
            "params": {"notifications": {"taskIds": self.task_ids}, "_meta": META},
        }
        try:
            with httpx.stream(
                "POST", f"{self.url}/mcp", json=body, headers=headers, timeout=90
            ) as response:
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        self.messages.append(line[6:])
                        if "result" in json.loads(line[6:]):
                            return
        except BaseException as exc:
            self.error = exc


# ---------------------------------------------------------------- what non-owners see
def dashboard_pages(url: str, who: Viewer, task_ids: list[str], asking: str | None) -> list:
    paths = [
        "/inbox/",
        "/inbox/?fragment=1",
        "/inbox/counts",
        "/tasks/",
        "/audit/",
        "/audit/export",
    ]
    paths += ["/audit/verify", "/tokens/"]
    for task_id in task_ids:
        paths += [f"/tasks/{task_id}/", f"/tasks/{task_id}/?fragment=live", f"/tasks/{task_id}/row"]
    if asking:
        paths.append(f"/tasks/{asking}/inputs/confirm/")
    events = AuditEvent.objects.filter(task_id__in=task_ids).values_list("chain", "seq")
    paths += [f"/audit/{chain}/{seq}/" for chain, seq in events]
    seen = []
    for path in paths:
        response = httpx.get(f"{url}{path}", cookies=who.cookies(), timeout=20)
        assert response.status_code < 500 and "/login" not in str(response.url), (path, response)
        seen.append((f"dashboard {path} as {who.name}", response.text))
    return seen


def api_and_mcp_answers(url: str, who: Viewer, task_ids: list[str]) -> list:
    seen = []
    for path in ["/api/v1/tasks", "/api/v1/audit/events"] + [
        f"/api/v1/tasks/{t}" for t in task_ids
    ]:
        response = httpx.get(f"{url}{path}", headers=who.headers(), timeout=20)
        assert response.status_code == 200, (path, response.text[:300])
        seen.append((f"REST {path} as {who.name}", response.text))
    for task_id in task_ids:
        reply = tasks_get(url, who.token, task_id)
        assert "result" in reply, (who.name, reply)
        seen.append((f"MCP tasks/get {task_id} as {who.name}", json.dumps(reply)))
    return seen


def exports(url: str, who: Viewer) -> list:
    seen = []
    for fmt in ("jsonl", "csv"):
        made = httpx.post(
            f"{url}/api/v1/audit/exports", json={"format": fmt}, headers=who.headers(), timeout=30
        )
        assert made.status_code == 201, made.text[:300]
        file = httpx.get(made.json()["file"], headers=who.headers(), timeout=30)
        assert file.status_code == 200 and made.json()["count"] > 5
        seen.append((f"{fmt} export by {who.name}", file.text))
    return seen


# ---------------------------------------------------------------- the test
def test_no_secret_of_the_corpus_reaches_any_sink_but_the_owners_own_answers(
    stack: Stack, cast: dict[str, Any]
) -> None:
    url = stack.web_urls["web"]
    secrets = corpus.build()
    owner = str(cast["alice"]["token"])
    secrets.needles["owner_token_in_a_query_string"] = [owner.split("_", 2)[2]]
    viewers = [viewer(cast, name) for name in VIEWERS]
    sockets = [SocketRecorder(url, who.session) for who in viewers]
    for socket in sockets:
        socket.start()
        assert socket.ready.wait(20) and socket.error is None, socket.error

    arguments = {"payload": secrets.payload, "prose": secrets.prose}
    asking = create(url, owner, "corpus_roundtrip", {**arguments, "deploy_pin": secrets.deploy_pin})
    task_ids = [
        asking,
        create(url, owner, "corpus_tool_error", arguments),
        create(url, owner, "corpus_crash", arguments),
    ]
    listen = ListenRecorder(url, viewers[0].token, task_ids)
    listen.start()
    wait_for(url, owner, [asking], ("input_required",))
    wait_for(url, owner, task_ids[1:], TERMINAL)

    seen: list[tuple[str, str]] = []
    for who in viewers:  # while the question waits
        seen += dashboard_pages(url, who, task_ids, asking)
        seen += api_and_mcp_answers(url, who, task_ids)
    waiting = tasks_get(url, viewers[0].token, asking)["result"]
    assert waiting["status"] == "input_required"  # olga may answer: she sees the question

    answer = {"action": "accept", "content": {"note": secrets.answer_note}}
    update = {"taskId": asking, "inputResponses": {"confirm": answer}}
    reply = post(url, owner, "tasks/update", update, name=asking)
    assert "result" in reply, reply
    final = wait_for(url, owner, task_ids, TERMINAL)
    assert final == {task_ids[0]: "completed", task_ids[1]: "completed", task_ids[2]: "failed"}

    for who in viewers:  # once everything is over
        seen += dashboard_pages(url, who, task_ids, None)
        seen += api_and_mcp_answers(url, who, task_ids)
    seen += exports(url, viewers[1])
    # A token in a query string: refused, and must not reach the access log either.
    for path in ("/mcp", "/api/v1/tasks", "/tasks/"):
        httpx.get(f"{url}{path}?access_token={owner}&x=1", timeout=10)
    # The owner sees their own secrets: they really went through the product.
    owner_view = json.dumps([tasks_get(url, owner, task_id) for task_id in task_ids])
    assert secrets.hits(owner_view) == sorted(
        set(secrets.needles) - {"owner_token_in_a_query_string"}
    )

    listen.join(60)
    time.sleep(1.0)  # the last WebSocket frames
    for socket in sockets:
        socket.stopping.set()
        socket.join(10)
        assert socket.error is None, socket.error
        assert socket.frames, "the dashboard socket sent nothing"
        seen += [("WebSocket frame", frame) for frame in socket.frames]
    assert listen.error is None and not listen.is_alive(), listen.error
    assert any("notifications/tasks" in message for message in listen.messages)
    seen += [("subscriptions/listen message as olga", message) for message in listen.messages]
    seen += [
        (f"audit row {row['chain']} #{row['seq']}", json.dumps(row, default=str))
        for row in AuditEvent.objects.values()
    ]
    stack.stop()  # the logs are complete once the processes have exited
    web_log, worker_log = stack.log("web"), stack.log("worker")
    seen += [("web log", web_log), ("worker log", worker_log)]

    leaks = {where: hits for where, text in seen if (hits := secrets.hits(text))}
    assert not leaks, "secrets found:\n" + "\n".join(f"{w}: {h}" for w, h in leaks.items())
    # Each sink held what it was searched for (so a sink that shows nothing cannot pass).
    assert "tool raised" in worker_log and "RuntimeError: cannot deploy" in worker_log
    assert "corpus_crash stdout: deploy billing" in worker_log
    assert "access_token=[REDACTED]" in web_log
    shown = dict(seen)
    page = shown[f"dashboard /tasks/{asking}/inputs/confirm/ as olga"]
    assert "Deploy with deploy billing" in page and "[REDACTED]" in page
    detail = json.loads(shown[f"REST /api/v1/tasks/{asking} as carl"])
    assert detail["task"]["status"] == "completed"
    assert "[REDACTED]" in json.dumps(detail["task"]["result"])
    assert "input_required" in waiting["status"] and "[REDACTED]" in json.dumps(waiting)
    assert AuditEvent.objects.filter(task_id__in=task_ids).count() >= 9
