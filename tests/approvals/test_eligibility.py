"""Who may decide on an approval gate (issue 21 point 2): a table of actor × policy × gate,
answered by access.may_decide alone — the same answer every channel gives."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from mcptasks import access
from mcptasks.models import ApiToken, InputKind, InputRequest, Task

pytestmark = pytest.mark.django_db

OPERATORS = {"required": 1, "roles": ["operator"], "groups": [], "users": []}
RELEASE = {"required": 2, "roles": [], "groups": ["release-managers"], "users": []}
NAMED = {"required": 1, "roles": [], "groups": [], "users": ["adam"]}

REQUESTER = "the requester may not approve their own request"
ISSUER = REQUESTER  # the issuer of the creating token is a requester too (access.requesters)
AUDITOR = "an auditor may not decide on approvals"
NOT_ELIGIBLE = "not an eligible reviewer under the gate's policy"
EXPIRED = "the approval gate has expired"

# (actor, policy, gate) -> the reason refused, or "" when the actor may decide.
TABLE = [
    ("alice", OPERATORS, "open", REQUESTER),
    ("amy", OPERATORS, "issued by amy", ISSUER),
    ("carl", OPERATORS, "open", AUDITOR),
    ("carl", {**OPERATORS, "roles": ["auditor", "operator"]}, "open", AUDITOR),
    ("olga", OPERATORS, "open", ""),
    ("olga", RELEASE, "open", NOT_ELIGIBLE),
    ("adam", OPERATORS, "adam named approver", ""),
    ("adam", {**OPERATORS, "named_approvers": False}, "adam named approver", NOT_ELIGIBLE),
    ("carl", OPERATORS, "carl named approver", AUDITOR),
    ("rita", RELEASE, "open", ""),
    ("adam", RELEASE, "open", NOT_ELIGIBLE),
    ("adam", NAMED, "open", ""),
    ("bob", NAMED, "open", "not a member of the task's tenant"),
    ("olga", OPERATORS, "expired", EXPIRED),
]


@pytest.mark.parametrize(("actor", "policy", "gate", "refused"), TABLE)
def test_who_may_decide_on_a_gate(
    actor: str,
    policy: dict[str, Any],
    gate: str,
    refused: str,
    make_task: Any,
    cast: dict[str, dict[str, Any]],
    users: dict[str, Any],
    release_managers: list[Any],
) -> None:
    people = {**users, **{u.username: u for u in release_managers}}
    task: Task = make_task("alice", "deploy_service")
    if gate == "issued by amy":
        token, _ = ApiToken.issue(
            user=users["alice"], tenant=cast["alice"]["tenant"], issued_by=users["amy"]
        )
        Task.objects.filter(pk=task.pk).update(token=token)
        task.refresh_from_db()
    if gate.endswith(" named approver"):
        grantee = users[gate.split()[0]]
        access.assign_delegation(grantee=grantee, task=task, delegation="answer")
    request = InputRequest.objects.create(
        task=task,
        tenant=task.tenant,
        principal_id=task.principal_id,
        token_issuer_id=task.token.issued_by_id if task.token else None,
        key="approval",
        method="elicitation/create",
        audience="operator",
        forbid_self_approval=True,
        kind=InputKind.APPROVAL,
        gate={"summary": {}, "policy": policy},
        deadline_at=timezone.now() - timedelta(seconds=1) if gate == "expired" else None,
    )
    decision = access.may_decide(people[actor], request, task)
    assert (bool(decision), decision.reason) == (not refused, refused)
    # may_answer — what the MCP and REST answer paths ask — gives the same answer for a gate.
    assert access.may_answer(people[actor], request, task).reason == decision.reason


def test_reviewer_groups_and_policies_are_managed_by_the_tenants_admins(
    cast: dict[str, dict[str, Any]], users: dict[str, Any]
) -> None:
    tenant = cast["alice"]["tenant"].pk
    assert access.may_manage_approvals(users["amy"], tenant)
    for name in ("olga", "carl", "alice", "bob"):
        assert not access.may_manage_approvals(users[name], tenant)


def test_an_operator_may_name_neither_herself_nor_an_auditor_approver(
    make_task: Any, users: dict[str, Any]
) -> None:
    task: Task = make_task("alice", "deploy_service")
    olga = users["olga"]
    assert access.may_name(olga, users["adam"], task, "answer")
    assert access.may_name(olga, olga, task, "answer").reason == (
        "an operator may not name themselves approver"
    )
    assert access.may_name(olga, users["carl"], task, "answer").reason == (
        "an auditor may not be named approver"
    )
    assert access.may_name(olga, users["carl"], task, "view")  # a viewer, not an approver
