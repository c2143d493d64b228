"""A reviewer-group member who cannot otherwise see the task (issue 21 point 2): being an
eligible reviewer grants exactly enough visibility to see the approval page and decide —
decided in access (access.gate_for_reviewer), the same on the dashboard, the REST API and MCP
``tasks/update`` (a client-audience gate) — and nothing more: the task page, the REST task and
``tasks/get`` stay hidden. Anyone else who cannot see the task finds nothing (404 / the
unknown-task -32602); those who can see it but may not decide get access's reason."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from audit.record import Actor
from mcptasks import lifecycle
from mcptasks.lifecycle import InputSpec
from mcptasks.models import (
    ApiToken,
    ApprovalDecision,
    InputKind,
    InputRequest,
    Membership,
    ReviewerGroup,
    Role,
    Task,
)
from mcptasks.tools.context import GATE_SCHEMA
from tests.protocol.conftest import McpClient

pytestmark = pytest.mark.django_db(transaction=True)

HIDDEN = "hidden"  # 404 on the dashboard and REST, the unknown-task -32602 on MCP
DECIDED = "decided"
NOT_ELIGIBLE = "not an eligible reviewer under the gate's policy"
AUDITOR = "an auditor may not decide on approvals"
REQUESTER = "the requester may not approve their own request"
NOT_FOUND = "Failed to retrieve task: Task not found"

# actor -> what every channel does with their decision on the gate.
TABLE = [
    ("rita", DECIDED),  # a plain member in the gate's reviewer group: cannot see the task
    ("adam", HIDDEN),  # a plain member outside the group: nothing to see
    ("bob", HIDDEN),  # another tenant's member
    ("olga", NOT_ELIGIBLE),  # an operator sees the task, but the policy names only the group
    ("carl", AUDITOR),  # an auditor in the group sees the task, and may never decide
    ("alice", REQUESTER),  # the requester, in the group too
]
CHANNELS = ["dashboard", "api", "mcp"]


@pytest.fixture
def people(cast: dict[str, Any], django_user_model: Any) -> dict[str, Any]:
    """The cast plus rita (acme member), with carl and alice also in ``release-managers``."""
    tenant = cast["alice"]["tenant"]
    rita = django_user_model.objects.create_user(username="rita", password="x")
    Membership.objects.create(user=rita, tenant=tenant, role=Role.MEMBER)
    group = ReviewerGroup.objects.create(tenant=tenant, name="release-managers")
    group.members.add(rita, cast["carl"]["user"], cast["alice"]["user"])
    everyone = {name: entry["user"] for name, entry in cast.items()}
    return {**everyone, "rita": rita}


@pytest.fixture
def gate(make_task: Callable[..., Any], people: dict[str, Any]) -> Task:
    """alice's task at a client-audience gate decided by ``release-managers`` (2 of them)."""
    task = make_task("alice", "echo_task", arguments={"service": "billing"})
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
                gate={
                    "summary": {"service": "billing"},
                    "policy": {"required": 2, "roles": [], "groups": ["release-managers"]},
                },
            )
        ],
        actor=Actor.system("test"),
    )


def token_of(user: Any) -> str:
    tenant = Membership.objects.filter(user=user).first().tenant  # type: ignore[union-attr]
    return ApiToken.issue(user=user, tenant=tenant, name="t", scopes=["api", "mcp"])[1]


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def decide(channel: str, user: Any, task_id: str) -> tuple[str, str]:
    """``(outcome, detail)`` of ``user`` approving through ``channel``: DECIDED, HIDDEN, or
    "refused" with the reason given."""
    if channel == "dashboard":
        client = signed_in(user)
        url = reverse("dashboard:answer", args=[task_id, "approval"])
        page = client.get(url)
        posted = client.post(url, {"approval-verdict": "approve", "approval-comment": "ok"})
        if page.status_code == 404:
            assert posted.status_code == 404
            return HIDDEN, ""
        if page.status_code == 403:
            assert posted.status_code == 403 and 'value="approve"' not in page.content.decode()
            return "refused", html.unescape(page.content.decode())
        assert page.status_code == 200 and 'value="approve"' in page.content.decode()
        assert posted.status_code == 302
        return DECIDED, posted["Location"]
    if channel == "api":
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {token_of(user)}")
        reply = api.post(
            f"/api/v1/approvals/{task_id}/approval/decisions",
            {"verdict": "approve", "comment": "ok"},
            format="json",
        )
        if reply.status_code == 404:
            return HIDDEN, ""
        if reply.status_code == 403:
            return "refused", reply.json()["detail"]
        assert reply.status_code == 200, reply.json()
        return DECIDED, ""
    mcp = McpClient(token_of(user))
    answer = {"action": "accept", "content": {"decision": "approve", "comment": "ok"}}
    reply = mcp.call("tasks/update", {"taskId": task_id, "inputResponses": {"approval": answer}})
    if "error" in reply.body:
        assert reply.error["code"] == -32602
        if reply.error["message"] == NOT_FOUND:
            return HIDDEN, ""
        return "refused", reply.error["message"]
    assert reply.result["_meta"]["dev.mcptasks/inputResponses"] == {"approval": "taken"}
    return DECIDED, ""


@pytest.mark.parametrize("channel", CHANNELS)
@pytest.mark.parametrize(("actor", "expected"), TABLE)
def test_what_a_reviewer_who_cannot_see_the_task_may_do_on_every_channel(
    actor: str, expected: str, channel: str, gate: Task, people: dict[str, Any]
) -> None:
    outcome, detail = decide(channel, people[actor], gate.pk)
    recorded = list(ApprovalDecision.objects.values_list("reviewer__username", "via"))
    if expected in (DECIDED, HIDDEN):
        assert outcome == expected
    else:
        assert outcome == "refused"
        # access's reason, on every channel (the requester's page explains it at length)
        reason = "forbids self-approval" if (actor, channel) == ("alice", "dashboard") else expected
        assert reason.lower() in detail.lower()
    via = {"dashboard": "dashboard", "api": "api", "mcp": "mcp"}[channel]
    assert recorded == ([(actor, via)] if expected == DECIDED else [])


def test_a_reviewer_sees_the_approval_page_and_nothing_else_of_the_task(
    gate: Task, people: dict[str, Any]
) -> None:
    rita = people["rita"]
    client = signed_in(rita)
    page_url = reverse("dashboard:answer", args=[gate.pk, "approval"])
    shown = client.get(page_url).content.decode()
    assert "billing" in shown and "0 of 2" in shown
    task_url = reverse("dashboard:task", args=[gate.pk])
    assert f'href="{task_url}"' not in shown  # no link to a page she may not see
    assert client.get(reverse("dashboard:task", args=[gate.pk])).status_code == 404
    mcp = McpClient(token_of(rita))
    assert mcp.call("tasks/get", {"taskId": gate.pk}).error["message"] == NOT_FOUND
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token_of(rita)}")
    assert api.get(f"/api/v1/tasks/{gate.pk}").status_code == 404
    listed = api.get("/api/v1/approvals").json()
    assert [(g["task_id"], g["key"]) for g in listed] == [(gate.pk, "approval")]

    # Deciding brings her back to the approval page, which shows her decision.
    posted = client.post(page_url, {"approval-verdict": "approve", "approval-comment": "ok"})
    assert posted["Location"] == page_url
    after = client.get(page_url)
    assert after.status_code == 200 and "rita</strong> approved" in after.content.decode()
    assert 'value="approve"' not in after.content.decode()  # decided once
    # A second member approves: the gate is closed, and rita still sees what she decided on.
    assert decide("api", people["carl"], gate.pk)[0] == "refused"
    other = signed_in(people["olga"]).get(page_url)
    assert other.status_code == 403
    gate_row = InputRequest.objects.get(pk=gate.input_requests.get().pk)
    assert gate_row.state == "pending"
