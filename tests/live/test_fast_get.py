"""The event-loop ``tasks/get`` (mcptasks/mcp/fast_get.py) against a real server process:
it answers exactly what the general path answers, only for the cases it may decide, and every
other case — foreign ids, role rights, tasks awaiting input, revoked or wrong tokens — reaches
the general path with its usual answer. Which path answered is read from /metrics."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.utils import timezone

from audit.record import Actor
from mcptasks import lifecycle, runner, tokens
from mcptasks.models import ApiToken, Task, TaskState
from mcptasks.wire import detailed_for

pytestmark = [pytest.mark.pg, pytest.mark.live, pytest.mark.django_db(transaction=True)]

SERVER_ENV = {"MCPTASKS_POLL_BURST": "5"}
VERSION = "2026-07-28"
CAPS = {"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}


def tasks_get(
    server: Any, token: str, task_id: str, capabilities: dict[str, Any] | None = None
) -> httpx.Response:
    capabilities = CAPS if capabilities is None else capabilities
    return httpx.post(
        server.mcp_url,
        json={
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tasks/get",
            "params": {
                "taskId": task_id,
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": VERSION,
                    "io.modelcontextprotocol/clientCapabilities": capabilities,
                },
            },
        },
        headers={
            "Accept": "application/json",
            "MCP-Protocol-Version": VERSION,
            "Mcp-Method": "tasks/get",
            "Mcp-Name": task_id,
            "Authorization": f"Bearer {token}",
        },
        timeout=10,
    )


def answered(server: Any) -> dict[str, float]:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return {
        path: float(count)
        for path, count in re.findall(
            r'^mcptasks_tasks_get_total\{path="(\w+)"\} (\S+)$', text, re.M
        )
    }


class PathProbe:
    """How many tasks/get each path answered since the probe was taken."""

    def __init__(self, server: Any) -> None:
        self.server, self.before = server, answered(server)

    def delta(self) -> dict[str, float]:
        now = answered(self.server)
        return {
            path: now.get(path, 0) - self.before.get(path, 0)
            for path in ("fast", "general")
            if now.get(path, 0) != self.before.get(path, 0)
        }


def expected(user: Any, task_id: str) -> dict[str, Any]:
    task = Task.objects.get(pk=task_id)
    return {"resultType": "complete", **detailed_for(user, task, CAPS)}


def new_token(entry: dict[str, Any]) -> tuple[ApiToken, str]:
    return tokens.issue_token(user=entry["user"], tenant=entry["tenant"], actor=Actor.system("t"))


def completed_task(make_task: Any) -> Task:
    task = make_task(owner="alice", tool_name="echo_task")
    runner.run_task(task.pk)
    return task  # type: ignore[no-any-return]


def warm(server: Any, token: str, task_id: str) -> None:
    """A first request records the token's use (general path); later ones may be fast."""
    assert tasks_get(server, token, task_id).status_code == 200


def test_owner_polls_get_the_general_paths_answer_for_every_settled_state(
    server, cast, make_task, run_jobs
):
    alice = cast["alice"]
    done = make_task(tool_name="echo_task", arguments={"text": "fast"})
    failed = make_task(tool_name="crash_task")
    cancelled = make_task(tool_name="echo_task")
    operator = make_task(tool_name="operator_gate")
    runner.run_task(done.pk)
    runner.run_task(failed.pk)
    runner.run_task(operator.pk)
    lifecycle.task_request_cancel(
        task_id=cancelled.pk, actor=Actor.for_user(alice["user"], "principal"), reason="test"
    )
    warm(server, alice["token"], done.pk)
    probe = PathProbe(server)
    states = []
    for task in (done, failed, cancelled, operator):
        reply = tasks_get(server, alice["token"], task.pk)
        assert reply.status_code == 200
        result = reply.json()["result"]
        result.pop("_meta")
        assert result == expected(alice["user"], task.pk)
        states.append(Task.objects.get(pk=task.pk).state)
    assert states == [
        TaskState.COMPLETED,
        TaskState.FAILED,
        TaskState.CANCELLED,
        TaskState.AWAITING_OPERATOR,
    ]
    assert probe.delta() == {"fast": 4}


def test_a_task_awaiting_the_clients_input_is_answered_by_the_general_path(server, cast, make_task):
    alice = cast["alice"]
    task = make_task(tool_name="ask_twice")
    runner.run_task(task.pk)
    warm(server, alice["token"], task.pk)
    probe = PathProbe(server)
    result = tasks_get(server, alice["token"], task.pk).json()["result"]
    assert result["status"] == "input_required" and result["inputRequests"]
    result.pop("_meta")
    assert result == expected(alice["user"], task.pk)
    assert probe.delta() == {"general": 1}


def test_another_principals_task_is_not_found_as_on_the_general_path(server, cast, make_task):
    task = completed_task(make_task)
    bob = cast["bob"]["token"]
    tasks_get(server, bob, task.pk)  # records bob's first use of his token
    probe = PathProbe(server)
    reply = tasks_get(server, bob, task.pk).json()
    assert reply["error"]["code"] == -32602
    assert "not found" in reply["error"]["message"].lower()
    assert probe.delta() == {"general": 1}


def test_an_auditors_role_right_is_decided_by_the_general_path(server, cast, make_task):
    task = completed_task(make_task)
    carl = cast["carl"]
    tasks_get(server, carl["token"], task.pk)
    probe = PathProbe(server)
    result = tasks_get(server, carl["token"], task.pk).json()["result"]
    result.pop("_meta")
    assert result == expected(carl["user"], task.pk)
    assert probe.delta() == {"general": 1}


def test_a_revoked_token_is_refused_on_the_very_next_poll(server, cast, make_task):
    alice = cast["alice"]
    token, plaintext = new_token(alice)
    task = completed_task(make_task)
    warm(server, plaintext, task.pk)
    assert tasks_get(server, plaintext, task.pk).status_code == 200
    tokens.revoke_token(token_id=token.pk, actor=Actor.system("test"))
    reply = tasks_get(server, plaintext, task.pk)
    assert reply.status_code == 401
    assert "expired or revoked" in reply.headers["www-authenticate"]


def test_a_token_whose_owner_left_its_tenant_is_refused_on_the_very_next_poll(
    server, cast, make_task
):
    """Issue 19: a token acts only while its owner is a member of its tenant, on this path
    too (the fast path's one query reads the membership with the token)."""
    from mcptasks.models import Membership

    alice = cast["alice"]
    task = completed_task(make_task)
    warm(server, alice["token"], task.pk)
    probe = PathProbe(server)
    assert tasks_get(server, alice["token"], task.pk).status_code == 200
    assert probe.delta() == {"fast": 1}
    Membership.objects.filter(user=alice["user"], tenant=alice["tenant"]).delete()
    reply = tasks_get(server, alice["token"], task.pk)
    assert reply.status_code == 401
    assert "no longer a member" in reply.headers["www-authenticate"]


@pytest.mark.parametrize(
    ("change", "status", "error"),
    [
        ({"expires_at": "past"}, 401, "invalid_token"),
        ({"scopes": ["dashboard"]}, 403, "insufficient_scope"),
        ({"secret": "wrong"}, 401, "invalid_token"),
    ],
)
def test_expired_unscoped_or_wrong_tokens_get_the_general_paths_errors(
    server, cast, make_task, change, status, error
):
    alice = cast["alice"]
    token, plaintext = new_token(alice)
    task = completed_task(make_task)
    warm(server, plaintext, task.pk)
    if change.get("expires_at"):
        ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(1))
    if change.get("scopes"):
        ApiToken.objects.filter(pk=token.pk).update(scopes=change["scopes"])
    if change.get("secret"):
        plaintext = plaintext[:-4] + ("AAAA" if not plaintext.endswith("AAAA") else "BBBB")
    reply = tasks_get(server, plaintext, task.pk)
    assert reply.status_code == status
    assert reply.json()["error"] == error


def test_without_the_tasks_extension_the_fast_path_refuses_like_the_general_one(
    server, cast, make_task
):
    alice = cast["alice"]
    task = completed_task(make_task)
    warm(server, alice["token"], task.pk)
    reply = tasks_get(server, alice["token"], task.pk, capabilities={}).json()
    assert reply["error"]["code"] == -32021


def test_polling_beyond_the_burst_is_throttled_on_the_fast_path(server, cast, make_task):
    alice = cast["alice"]
    task = completed_task(make_task)
    warm(server, alice["token"], task.pk)
    probe = PathProbe(server)
    codes = [tasks_get(server, alice["token"], task.pk).status_code for _ in range(8)]
    assert codes[:4] == [200] * 4
    assert codes[-1] == 429
    assert probe.delta().get("fast", 0) >= 4


def test_the_first_use_of_a_token_is_recorded_by_the_general_path(server, cast, make_task):
    alice = cast["alice"]
    token, plaintext = new_token(alice)
    task = completed_task(make_task)
    probe = PathProbe(server)
    assert tasks_get(server, plaintext, task.pk).status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None
    assert tasks_get(server, plaintext, task.pk).status_code == 200
    assert probe.delta() == {"general": 1, "fast": 1}
