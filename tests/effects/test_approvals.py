"""Approvals with separation of duties (issue 6, DESIGN §8), on the demo's ``deploy_service``.

alice asks for a production rollout; its approval gate is answerable only by an operator other
than her. She cannot answer it on any channel — MCP ``tasks/update``, the REST API, the
dashboard's form handler; olga can, through each channel in turn (the MCP channel carries
``client`` and ``any`` requests only, so there on a gate of audience ``any``); adam can once olga
names him approver, and not once she revokes it. Tasks run in this process with
``mcptasks.runner.run_task``, as a worker would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from mcptasks import access
from mcptasks.models import ApiToken, ApprovalDecision, InputRequest, Task
from mcptasks.runner import run_task
from mcptasks.tools.fakes import fake_cloud

pytestmark = pytest.mark.django_db(transaction=True)

DEPLOY = {"service": "billing", "version": "1.4.2", "environment": "production"}
# The gate's answer on MCP and the REST answer endpoint: a reviewer's decision (issue 21).
APPROVE = {"action": "accept", "content": {"decision": "approve", "comment": "looks good"}}
SELF_APPROVAL_REFUSED = "the requester may not approve their own request"

AuditOf = Callable[..., list[tuple[str, str, dict[str, Any]]]]


@pytest.fixture
def api_for(cast: dict[str, dict[str, Any]]) -> Callable[[str], APIClient]:
    """``api_for("olga")`` → a REST client with an ``api``-scoped token of hers."""

    def make(name: str) -> APIClient:
        entry = cast[name]
        _, secret = ApiToken.issue(
            user=entry["user"], tenant=entry["tenant"], name=f"{name} api", scopes=["api"]
        )
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
        return client

    return make


@pytest.fixture
def dashboard_for(users: dict[str, Any]) -> Callable[[str], Client]:
    def make(name: str) -> Client:
        client = Client()
        client.force_login(users[name])
        return client

    return make


def approval(task_id: str, key: str = "approval") -> InputRequest:
    return InputRequest.objects.get(task_id=task_id, key=key)


def answer_url(task_id: str) -> str:
    return f"/api/v1/tasks/{task_id}/input-requests/approval/answer"


def post_form(client: Client, task_id: str) -> Any:
    """The dashboard's approval page, submitted: Approve, with a comment."""
    return client.post(
        reverse("dashboard:answer", args=[task_id, "approval"]),
        {"approval-verdict": "approve", "approval-comment": "looks good"},
    )


def assert_still_waiting(task_id: str, audit_of: AuditOf) -> None:
    assert approval(task_id).state == "pending"
    assert Task.objects.get(pk=task_id).state == "awaiting_operator"
    assert audit_of(task_id, "task.input_answered", "approval.approved") == []
    assert not ApprovalDecision.objects.filter(task_id=task_id).exists()


def assert_answered(task_id: str, *, by: str, via: str, audit_of: AuditOf) -> None:
    request = approval(task_id)
    assert (request.state, request.answered_by.username, request.answered_via) == (
        "answered",
        by,
        via,
    )
    assert [
        (who, data["via"], data["comment"])
        for _, who, data in audit_of(task_id, "approval.approved")
    ] == [(by, via, "looks good")]
    assert [
        (d.reviewer.username, d.verdict, d.via)
        for d in ApprovalDecision.objects.filter(task_id=task_id)
    ] == [(by, "approve", via)]
    # The approved rollout runs to the end.
    assert run_task(task_id) == "completed"
    content = Task.objects.get(pk=task_id).result["structuredContent"]
    assert content["environment"] == "production"
    assert [c["kind"] for c in fake_cloud.calls() if c["key"].startswith(task_id)] == [
        "build",
        "rollout",
    ]


# ---------------------------------------------------------------- the gate
def test_production_deploy_waits_for_an_operator_other_than_the_requester(
    start: Callable[..., str], mcp_for: Callable[[str], Any], users: dict[str, Any]
) -> None:
    task_id = start()
    request = approval(task_id)
    assert (request.audience, request.forbid_self_approval, request.state) == (
        "operator",
        True,
        "pending",
    )
    assert not access.may_answer(users["alice"], request, request.task)
    assert access.may_answer(users["alice"], request, request.task).reason == SELF_APPROVAL_REFUSED
    assert access.may_answer(users["olga"], request, request.task)
    # On the wire: working, waiting for an operator, nothing for alice to answer.
    wire = mcp_for("alice").call("tasks/get", {"taskId": task_id}).result
    assert wire["status"] == "working"
    assert "operator" in wire["statusMessage"].lower()
    assert "inputRequests" not in wire
    # In olga's inbox, not in alice's.
    assert request in access.answerable_inputs(users["olga"])
    assert request not in access.answerable_inputs(users["alice"])


# ---------------------------------------------------------------- MCP tasks/update
def test_alice_cannot_approve_her_deploy_through_tasks_update(
    start: Callable[..., str], mcp_for: Callable[[str], Any], audit_of: AuditOf
) -> None:
    task_id = start()
    alice = mcp_for("alice")
    reply = alice.call("tasks/update", {"taskId": task_id, "inputResponses": {"approval": APPROVE}})
    assert reply.result["resultType"] == "complete"  # acknowledged, and ignored
    assert_still_waiting(task_id, audit_of)
    assert "inputRequests" not in alice.call("tasks/get", {"taskId": task_id}).result


def test_on_mcp_a_self_approval_gate_is_hidden_from_the_requester_and_answered_by_olga(
    start: Callable[..., str], mcp_for: Callable[[str], Any], audit_of: AuditOf
) -> None:
    """Audience ``any``: MCP carries it, so separation of duties is all that keeps alice out."""
    task_id = start("any_self_approval_gate", {})
    alice, olga = mcp_for("alice"), mcp_for("olga")
    mine = alice.call("tasks/get", {"taskId": task_id}).result
    assert mine["status"] == "working" and "inputRequests" not in mine
    ok = {"action": "accept", "content": {"ok": True}}
    alice.call("tasks/update", {"taskId": task_id, "inputResponses": {"approval": ok}})
    assert approval(task_id).state == "pending"
    assert audit_of(task_id, "task.input_answered") == []

    theirs = olga.call("tasks/get", {"taskId": task_id}).result
    assert theirs["status"] == "input_required"
    assert list(theirs["inputRequests"]) == ["approval"]
    olga.call("tasks/update", {"taskId": task_id, "inputResponses": {"approval": ok}})
    assert [(who, data["via"]) for _, who, data in audit_of(task_id, "task.input_answered")] == [
        ("olga", "mcp")
    ]
    assert run_task(task_id) == "completed"
    assert Task.objects.get(pk=task_id).result["content"][0]["text"] == "approved=True"


# ---------------------------------------------------------------- REST API
def test_alice_cannot_approve_her_deploy_through_the_rest_api(
    start: Callable[..., str], api_for: Callable[[str], APIClient], audit_of: AuditOf
) -> None:
    task_id = start()
    response = api_for("alice").post(answer_url(task_id), {"response": APPROVE}, format="json")
    assert response.status_code == 403
    assert SELF_APPROVAL_REFUSED in response.json()["detail"].lower()
    assert_still_waiting(task_id, audit_of)


def test_olga_approves_through_the_rest_api(
    start: Callable[..., str], api_for: Callable[[str], APIClient], audit_of: AuditOf
) -> None:
    task_id = start()
    response = api_for("olga").post(answer_url(task_id), {"response": APPROVE}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "queued"
    assert_answered(task_id, by="olga", via="api", audit_of=audit_of)


# ---------------------------------------------------------------- dashboard
def test_alice_cannot_approve_her_deploy_through_the_dashboard(
    start: Callable[..., str], dashboard_for: Callable[[str], Client], audit_of: AuditOf
) -> None:
    task_id = start()
    response = post_form(dashboard_for("alice"), task_id)
    assert response.status_code == 403
    assert "forbids self-approval" in response.content.decode()
    assert_still_waiting(task_id, audit_of)


def test_olga_approves_through_the_dashboard(
    start: Callable[..., str], dashboard_for: Callable[[str], Client], audit_of: AuditOf
) -> None:
    task_id = start()
    response = post_form(dashboard_for("olga"), task_id)
    assert response.status_code == 302, response.content
    assert_answered(task_id, by="olga", via="dashboard", audit_of=audit_of)


# ---------------------------------------------------------------- named approvers
def grant(olga: APIClient, task_id: str, *, revoke: bool = False) -> None:
    action = "revoke" if revoke else "grant"
    response = olga.post(
        f"/api/v1/tasks/{task_id}/delegations/{action}",
        {"user": "adam", "delegation": "answer"},
        format="json",
    )
    assert response.status_code == 200, response.content


def test_adam_approves_once_olga_names_him_approver(
    start: Callable[..., str],
    api_for: Callable[[str], APIClient],
    dashboard_for: Callable[[str], Client],
    audit_of: AuditOf,
) -> None:
    task_id = start()
    adam = dashboard_for("adam")
    assert post_form(adam, task_id).status_code == 404  # not his task: not even visible
    assert_still_waiting(task_id, audit_of)

    grant(api_for("olga"), task_id)
    assert [
        (who, data["grantee"], data["delegation"])
        for _, who, data in audit_of(task_id, "delegation.granted")
    ] == [("olga", "adam", "answer")]
    assert post_form(adam, task_id).status_code == 302
    assert_answered(task_id, by="adam", via="dashboard", audit_of=audit_of)


def test_adam_cannot_approve_once_olga_revokes_it(
    start: Callable[..., str],
    api_for: Callable[[str], APIClient],
    dashboard_for: Callable[[str], Client],
    users: dict[str, Any],
    audit_of: AuditOf,
) -> None:
    task_id = start()
    olga = api_for("olga")
    grant(olga, task_id)
    assert access.may_answer(users["adam"], approval(task_id), approval(task_id).task)
    grant(olga, task_id, revoke=True)
    assert [
        (action, who, data["grantee"], data["delegation"])
        for action, who, data in audit_of(task_id, "delegation.granted", "delegation.revoked")
    ] == [
        ("delegation.granted", "olga", "adam", "answer"),
        ("delegation.revoked", "olga", "adam", "answer"),
    ]

    assert post_form(dashboard_for("adam"), task_id).status_code == 404
    response = api_for("adam").post(answer_url(task_id), {"response": APPROVE}, format="json")
    assert response.status_code == 404
    assert not access.may_answer(users["adam"], approval(task_id), approval(task_id).task)
    assert_still_waiting(task_id, audit_of)


# ---------------------------------------------------------------- an operator's own deploy
def test_olga_cannot_approve_her_own_deploy_on_any_channel_but_a_named_approver_can(
    start: Callable[..., str],
    mcp_for: Callable[[str], Any],
    api_for: Callable[[str], APIClient],
    dashboard_for: Callable[[str], Client],
    users: dict[str, Any],
    audit_of: AuditOf,
) -> None:
    """Separation of duties binds an operator too: her role would let her answer anyone
    else's approval, never her own."""
    task_id = start(owner="olga")
    request = approval(task_id)
    assert access.may_answer(users["olga"], request, request.task).reason == SELF_APPROVAL_REFUSED
    mcp_for("olga").call(
        "tasks/update", {"taskId": task_id, "inputResponses": {"approval": APPROVE}}
    )
    response = api_for("olga").post(answer_url(task_id), {"response": APPROVE}, format="json")
    assert response.status_code == 403
    assert SELF_APPROVAL_REFUSED in response.json()["detail"].lower()
    assert post_form(dashboard_for("olga"), task_id).status_code == 403
    assert request not in access.answerable_inputs(users["olga"])
    assert_still_waiting(task_id, audit_of)

    grant(api_for("olga"), task_id)
    response = api_for("adam").post(answer_url(task_id), {"response": APPROVE}, format="json")
    assert response.status_code == 200, response.content
    assert_answered(task_id, by="adam", via="api", audit_of=audit_of)
