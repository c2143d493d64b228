"""Separation of duties binds to people, not tokens (issue 19).

olga, an operator of acme, issues on the dashboard an ``api`` + ``mcp`` token owned by adam,
creates a production deploy with it, and tries to approve it herself: refused on every channel
(MCP ``tasks/update``, the REST API, the dashboard), because the person who issued the token
that created a task counts as a requester. adam, the token's owner, is refused too; a third
person olga names approver answers it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from mcptasks import access
from mcptasks.models import ApiToken, InputRequest
from mcptasks.runner import run_task
from tests.effects import test_approvals as approvals
from tests.protocol.conftest import McpClient

pytestmark = pytest.mark.django_db(transaction=True)

APPROVE = approvals.APPROVE
SELF_APPROVAL_REFUSED = approvals.SELF_APPROVAL_REFUSED
api_for = approvals.api_for
dashboard_for = approvals.dashboard_for
AuditOf = approvals.AuditOf


def issue_on_dashboard(olga: Client, owner: Any) -> str:
    """olga issues a token owned by ``owner`` through the dashboard's form; its plaintext."""
    page = olga.post(
        reverse("dashboard:tokens"),
        {
            "name": "for adam",
            "owner": str(owner.pk),
            "scopes": ["mcp", "api"],
            "expires_in_days": "30",
        },
    )
    assert page.status_code == 200, page.content[:300]
    match = re.search(r"mcpt_[0-9a-f]+_[A-Za-z0-9_-]+", page.content.decode())
    assert match, "the issued token is shown once"
    return match.group(0)


@pytest.fixture
def proxy_token(dashboard_for: Callable[[str], Client], users: dict[str, Any]) -> str:
    plaintext = issue_on_dashboard(dashboard_for("olga"), users["adam"])
    lookup = plaintext.split("_")[1]
    token = ApiToken.objects.get(lookup=lookup)
    assert (token.user, token.issued_by) == (users["adam"], users["olga"])
    return plaintext


def start_with(token: str, tool: str, arguments: dict[str, Any]) -> str:
    reply = McpClient(token).tool(tool, arguments)
    assert reply.result["resultType"] == "task", reply.body
    task_id: str = reply.result["taskId"]
    assert run_task(task_id) in ("awaiting_operator", "awaiting_input")
    return task_id


def test_token_issued_for_someone_else_records_its_issuer(
    proxy_token: str, users: dict[str, Any]
) -> None:
    from audit.models import AuditEvent

    event = AuditEvent.objects.filter(action="token.issued").latest("id")
    assert event.actor_display == "olga"
    assert event.data["owner"] == "adam" and event.data["issued_by_id"] == users["olga"].pk


def test_issuer_of_the_creating_token_cannot_approve_on_any_channel(
    run_jobs: Any,
    proxy_token: str,
    api_for: Callable[[str], APIClient],
    dashboard_for: Callable[[str], Client],
    users: dict[str, Any],
    audit_of: AuditOf,
) -> None:
    task_id = start_with(proxy_token, "deploy_service", approvals.DEPLOY)
    request = approvals.approval(task_id)
    assert request.task.principal == users["adam"]
    assert access.requesters(request.task) == {users["adam"].pk, users["olga"].pk}
    assert access.may_answer(users["olga"], request, request.task).reason == SELF_APPROVAL_REFUSED
    assert request not in access.answerable_inputs(users["olga"])

    # REST (olga's own api token) and the dashboard: 403 with the reason.
    response = api_for("olga").post(
        approvals.answer_url(task_id), {"response": APPROVE}, format="json"
    )
    assert response.status_code == 403
    assert SELF_APPROVAL_REFUSED in response.json()["detail"].lower()
    assert approvals.post_form(dashboard_for("olga"), task_id).status_code == 403
    # Nor through the token she issued (its owner is the requester).
    response = APIClient()
    response.credentials(HTTP_AUTHORIZATION=f"Bearer {proxy_token}")
    answered = response.post(approvals.answer_url(task_id), {"response": APPROVE}, format="json")
    assert answered.status_code in (403, 404)
    approvals.assert_still_waiting(task_id, audit_of)

    # A third person olga names approver answers it.
    olga_api = api_for("olga")
    granted = olga_api.post(
        f"/api/v1/tasks/{task_id}/delegations/grant",
        {"user": "amy", "delegation": "answer"},
        format="json",
    )
    assert granted.status_code == 200, granted.content
    response = api_for("amy").post(
        approvals.answer_url(task_id), {"response": APPROVE}, format="json"
    )
    assert response.status_code == 200, response.content
    assert InputRequest.objects.get(pk=request.pk).answered_by == users["amy"]


def test_issuer_of_the_creating_token_cannot_approve_through_tasks_update(
    run_jobs: Any,
    proxy_token: str,
    mcp_for: Callable[[str], Any],
    audit_of: AuditOf,
) -> None:
    """Audience ``any`` travels on MCP: only separation of duties keeps olga out there."""
    task_id = start_with(proxy_token, "any_self_approval_gate", {})
    olga = mcp_for("olga")
    seen = olga.call("tasks/get", {"taskId": task_id}).result
    assert seen["status"] == "working" and "inputRequests" not in seen
    ok = {"action": "accept", "content": {"ok": True}}
    reply = olga.call("tasks/update", {"taskId": task_id, "inputResponses": {"approval": ok}})
    assert reply.result["resultType"] == "complete"  # acknowledged, and ignored
    assert approvals.approval(task_id).state == "pending"
    assert audit_of(task_id, "task.input_answered") == []
