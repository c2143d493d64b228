"""Every channel decides through access.may_decide (issue 21 point 6): the dashboard, the REST
API (``/api/v1/approvals``) and, for a client-audience gate, MCP ``tasks/update`` — each refuses
an ineligible reviewer with the same reason and records an eligible one's decision."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from audit.record import Actor
from mcptasks import lifecycle
from mcptasks.lifecycle import InputSpec
from mcptasks.models import ApprovalDecision, InputKind, InputRequest, Task
from mcptasks.task_ids import distinctive
from mcptasks.tools.context import GATE_SCHEMA
from tests.api import conftest as api_fixtures
from tests.api.conftest import ok, problem

pytestmark = pytest.mark.django_db(transaction=True)

api_tokens = api_fixtures.api_tokens
api = api_fixtures.api
paused_deploy = api_fixtures.paused_deploy
fake_cloud = api_fixtures.fake_cloud

REQUESTER = "the requester may not approve their own request"
AUDITOR = "an auditor may not decide on approvals"


def decisions_path(task_id: str, key: str = "approval") -> str:
    return f"/api/v1/approvals/{task_id}/{key}/decisions"


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_rest_api_refuses_the_requester_and_the_auditor_and_records_olgas_decision(
    api: Any, paused_deploy: Callable[..., Task]
) -> None:
    task = paused_deploy("alice")
    approve = {"verdict": "approve", "comment": "ok"}
    body = problem(api("alice").post(decisions_path(task.pk), approve), 403)
    assert body["detail"] == REQUESTER.capitalize() + "."
    body = problem(api("carl").post(decisions_path(task.pk), approve), 403)
    assert body["detail"] == AUDITOR.capitalize() + "."
    problem(api("bob").post(decisions_path(task.pk), approve), 404)  # another tenant's task
    problem(api("olga").post(decisions_path(task.pk), {"verdict": "reject"}), 422)
    problem(api("olga").post(decisions_path(task.pk), {"verdict": "maybe"}), 422)
    problem(api("olga").post(decisions_path(task.pk, "nope"), approve), 404)
    assert not ApprovalDecision.objects.exists()

    listed = ok(api("olga").get("/api/v1/approvals"))
    assert [(g["task_id"], g["key"]) for g in listed] == [(task.pk, "approval")]
    assert listed[0]["summary"]["service"] == "billing"
    assert ok(api("alice").get("/api/v1/approvals")) == []
    assert ok(api("carl").get("/api/v1/approvals")) == []

    gate = ok(api("olga").post(decisions_path(task.pk), approve))
    assert (gate["state"], gate["outcome"], gate["approvals"]) == ("answered", "approved", 1)
    assert [(d["reviewer"], d["verdict"], d["via"]) for d in gate["decisions"]] == [
        ("olga", "approve", "api")
    ]
    body = problem(api("olga").post(decisions_path(task.pk), approve), 409)
    assert "no longer pending" in body["detail"]


def test_the_dashboard_refuses_with_the_same_reason_and_never_shows_an_auditor_the_buttons(
    paused_deploy: Callable[..., Task], users: dict[str, Any]
) -> None:
    task = paused_deploy("alice")
    url = reverse("dashboard:answer", args=[task.pk, "approval"])
    page = signed_in(users["carl"]).get(url)
    html = page.content.decode()
    assert page.status_code == 403
    assert AUDITOR.capitalize() in html and 'value="approve"' not in html
    refused = signed_in(users["carl"]).post(url, {"approval-verdict": "approve"})
    assert refused.status_code == 403 and not ApprovalDecision.objects.exists()
    olga_page = signed_in(users["olga"]).get(url).content.decode()
    assert 'value="approve"' in olga_page
    # Context to decide on: what, the effects so far, the requester's earlier runs.
    assert "billing" in olga_page and "1.2.3" in olga_page
    assert "data-effects" in olga_page and "build" in olga_page
    earlier = paused_deploy("alice")
    olga_page = signed_in(users["olga"]).get(url).content.decode()
    assert "data-recent" in olga_page and distinctive(earlier.pk)[:8] in olga_page


@pytest.fixture
def client_gate(make_task: Callable[..., Any]) -> Task:
    """alice's task waiting on a client-audience gate (audience any: MCP carries it)."""
    task = make_task("alice", "echo_task")
    task = lifecycle.task_claim(task_id=task.pk, worker="test")
    return lifecycle.task_request_input(
        task_id=task.pk,
        attempt=task.attempt,
        requests=[
            InputSpec(
                key="approval",
                method="elicitation/create",
                params={"mode": "form", "message": "Ship it?", "requestedSchema": GATE_SCHEMA},
                audience="any",
                forbid_self_approval=True,
                kind=InputKind.APPROVAL,
                gate={"summary": {}, "policy": {"required": 1, "roles": ["operator"]}},
            )
        ],
        actor=Actor.system("test"),
    )


def test_mcp_tasks_update_refuses_with_the_same_reason_and_records_olgas_decision(
    client_gate: Task, mcp_for: Callable[[str], Any], audit_of: Any
) -> None:
    decide = {"action": "accept", "content": {"decision": "approve", "comment": "ok"}}
    update = {"taskId": client_gate.pk, "inputResponses": {"approval": decide}}
    for name, reason in (("alice", REQUESTER), ("carl", AUDITOR)):
        reply = mcp_for(name).call("tasks/update", update)
        assert reply.error["code"] == -32602
        assert reply.error["message"] == f"inputResponses['approval']: {reason}"
    assert (
        "inputRequests" not in mcp_for("alice").call("tasks/get", {"taskId": client_gate.pk}).result
    )
    reject = {"action": "accept", "content": {"decision": "reject"}}
    reply = mcp_for("olga").call(
        "tasks/update", {"taskId": client_gate.pk, "inputResponses": {"approval": reject}}
    )
    assert reply.error["code"] == -32602 and "comment" in reply.error["message"]
    assert not ApprovalDecision.objects.exists()

    seen = mcp_for("olga").call("tasks/get", {"taskId": client_gate.pk}).result
    assert list(seen["inputRequests"]) == ["approval"]
    assert mcp_for("olga").call("tasks/update", update).result["resultType"] == "complete"
    gate = InputRequest.objects.get(task=client_gate, key="approval")
    assert (gate.outcome, gate.answered_via) == ("approved", "mcp")
    assert [who for _, who, _ in audit_of(client_gate.pk, "approval.approved")] == ["olga"]
