"""Approval gates are decisions, not forms (issue 21 point 3), on the demo's production deploy:
each reviewer approves or rejects (a comment required to reject), one audited row per decision,
the gate opens at N approvals and closes at the first reject, a second decision by the same
reviewer is refused, and a rejected deploy says *rejected* everywhere but the wire's status."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from audit.record import Actor
from mcptasks import lifecycle
from mcptasks.models import ApprovalDecision, InputRequest, Task
from mcptasks.runner import run_task
from mcptasks.tools.fakes import fake_cloud

pytestmark = pytest.mark.django_db(transaction=True)


def decide(task_id: str, user: Any, verdict: str, comment: str = "", via: str = "api") -> Task:
    return lifecycle.task_decide_approval(
        task_id=task_id,
        key="approval",
        reviewer=user,
        verdict=verdict,
        comment=comment,
        actor=Actor.for_user(user, kind="operator"),
        via=via,
    )


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def calls_of(task_id: str) -> list[str]:
    return [c["kind"] for c in fake_cloud.calls() if c["key"].startswith(task_id)]


def test_a_rejected_deploy_is_rejected_on_the_wire_the_list_the_page_and_the_audit_trail(
    start: Callable[..., str], mcp_for: Callable[[str], Any], users: dict[str, Any], audit_of: Any
) -> None:
    task_id = start()
    olga = signed_in(users["olga"])
    page = olga.get(reverse("dashboard:answer", args=[task_id, "approval"]))
    assert page.status_code == 200
    html = page.content.decode()
    assert 'value="approve"' in html and 'value="reject"' in html and "billing" in html
    # A reject without a comment is refused by the form and changes nothing.
    url = reverse("dashboard:answer", args=[task_id, "approval"])
    assert olga.post(url, {"approval-verdict": "reject"}).status_code == 422
    assert ApprovalDecision.objects.count() == 0
    olga.post(url, {"approval-verdict": "reject", "approval-comment": "CAB said no"})
    assert InputRequest.objects.get(task_id=task_id, key="approval").outcome == "rejected"
    assert run_task(task_id) == "completed"

    wire = mcp_for("alice").call("tasks/get", {"taskId": task_id}).result
    assert wire["status"] == "completed"
    assert wire["result"]["structuredContent"]["status"] == "rejected"
    assert wire["result"]["structuredContent"]["comment"] == "CAB said no"
    assert calls_of(task_id) == ["build"]  # the rollout effect never ran

    task = Task.objects.get(pk=task_id)
    assert task.outcome == "rejected"
    rejected = olga.get(reverse("dashboard:tasks"), {"outcome": "rejected"}).content.decode()
    completed = olga.get(reverse("dashboard:tasks"), {"outcome": "completed"}).content.decode()
    assert task_id[:8] in rejected and task_id[:8] not in completed
    detail = olga.get(reverse("dashboard:task", args=[task_id])).content.decode()
    assert 'data-state="rejected"' in detail and 'data-state="completed"' not in detail
    assert [(who, data["comment"]) for _, who, data in audit_of(task_id, "approval.rejected")] == [
        ("olga", "CAB said no")
    ]
    assert audit_of(task_id, "task.completed")[0][2]["outcome"] == "rejected"


def test_the_gate_opens_at_the_required_approvals_and_the_rollout_runs(
    start: Callable[..., str], users: dict[str, Any], release_managers: list[Any], audit_of: Any
) -> None:
    task_id = start()
    gate = InputRequest.objects.get(task_id=task_id, key="approval")
    gate.gate["policy"].update(required=2, roles=[], groups=["release-managers"])
    gate.save(update_fields=["gate"])
    rita, ravi, _ = release_managers
    decide(task_id, rita, "approve")
    assert Task.objects.get(pk=task_id).status_message == "Waiting for approval (1 of 2)"
    assert InputRequest.objects.get(pk=gate.pk).state == "pending"
    decide(task_id, ravi, "approve", "fine")
    assert InputRequest.objects.get(pk=gate.pk).outcome == "approved"
    assert run_task(task_id) == "completed"
    task = Task.objects.get(pk=task_id)
    assert task.outcome == "" and task.result["structuredContent"]["status"] == "deployed"
    assert calls_of(task_id) == ["build", "rollout"]
    assert [who for _, who, _ in audit_of(task_id, "approval.approved")] == ["rita", "ravi"]
    assert len(audit_of(task_id, "approval.gate_opened")) == 1


def test_a_second_decision_by_the_same_reviewer_is_refused(
    start: Callable[..., str], users: dict[str, Any], release_managers: list[Any]
) -> None:
    task_id = start()
    gate = InputRequest.objects.get(task_id=task_id, key="approval")
    gate.gate["policy"].update(required=2)
    gate.save(update_fields=["gate"])
    decide(task_id, users["olga"], "approve")
    with pytest.raises(lifecycle.DecisionRefused, match="already decided"):
        decide(task_id, users["olga"], "reject", "changed my mind")
    assert list(ApprovalDecision.objects.values_list("verdict", flat=True)) == ["approve"]


def test_a_reject_needs_a_comment(start: Callable[..., str], users: dict[str, Any]) -> None:
    task_id = start()
    with pytest.raises(lifecycle.DecisionRefused, match="comment"):
        decide(task_id, users["olga"], "reject", "   ")
    assert not ApprovalDecision.objects.exists()


def test_a_form_answer_cannot_settle_an_approval_gate(
    start: Callable[..., str], users: dict[str, Any]
) -> None:
    """Accept with a form's content is not a decision: the gate waits for reviewers."""
    task_id = start()
    with pytest.raises(lifecycle.InputNotPending):
        lifecycle.task_answer_input(
            task_id=task_id,
            key="approval",
            response={"action": "accept", "content": {"decision": "approve"}},
            actor=Actor.for_user(users["olga"], kind="operator"),
            via="dashboard",
        )
    assert InputRequest.objects.get(task_id=task_id, key="approval").state == "pending"
