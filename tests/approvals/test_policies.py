"""Stored approval policies (issue 21 point 1): a tenant admin tightens deploy_service's gate
for environment=production through the REST API; the rule is versioned and audited, and a gate
declared afterwards applies it (two approvals from release-managers) with its digest."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from audit.models import AuditEvent
from mcptasks.models import ApprovalPolicyRule, InputRequest
from tests.api import conftest as api_fixtures
from tests.api.conftest import ok, problem

pytestmark = pytest.mark.django_db(transaction=True)

api_tokens = api_fixtures.api_tokens
api = api_fixtures.api

PRODUCTION_RULE = {
    "tool": "deploy_service",
    "argument": "environment",
    "value": "production",
    "required_approvals": 2,
    "groups": ["release-managers"],
}


def test_a_tenant_admin_tightens_production_deploys_and_the_next_gate_applies_it(
    api: Any, start: Callable[..., str], release_managers: list[Any], audit_of: Any
) -> None:
    problem(
        api("olga").post("/api/v1/approval-policies", {**PRODUCTION_RULE, "tenant": "acme"}), 403
    )
    problem(api("amy").post("/api/v1/approval-policies", {**PRODUCTION_RULE, "groups": []}), 422)
    first = ok(api("amy").post("/api/v1/approval-policies", PRODUCTION_RULE), 201)
    second = ok(api("amy").post("/api/v1/approval-policies", PRODUCTION_RULE), 201)
    assert (first["version"], second["version"]) == (1, 2)
    assert list(
        ApprovalPolicyRule.objects.filter(active=True).values_list("version", flat=True)
    ) == [2]
    assert [r["id"] for r in ok(api("amy").get("/api/v1/approval-policies"))] == [second["id"]]
    assert ok(api("olga").get("/api/v1/approval-policies")) == []
    changed = AuditEvent.objects.filter(action="approval.policy_changed").order_by("seq")
    assert [(e.actor_display, e.data["version"]) for e in changed] == [("amy", 1), ("amy", 2)]

    production = InputRequest.objects.get(task_id=start(), key="approval")
    policy = production.gate["policy"]
    assert (policy["required"], policy["groups"], policy["rule"]["version"]) == (
        2,
        ["release-managers"],
        2,
    )
    assert len(policy["digest"]) == 64
    # The tool's own default still applies to a gate the rule does not select.
    assert resolve_default("staging")["required"] == 1
    assert resolve_default("production")["required"] == 2


def resolve_default(environment: str) -> dict[str, Any]:
    from mcptasks import approval_policies
    from mcptasks.models import Tenant

    return approval_policies.resolve(
        tenant_id=Tenant.objects.get(slug="acme").pk,
        tool_name="deploy_service",
        key="approval",
        arguments={"environment": environment},
        default={"required": 1, "roles": ["operator"]},
    )


def test_a_tenant_admin_sets_a_reviewer_group_of_members_only(
    api: Any, cast: dict[str, Any]
) -> None:
    group = {"name": "release-managers", "members": ["adam", "olga"]}
    problem(api("olga").post("/api/v1/reviewer-groups", {**group, "tenant": "acme"}), 403)
    body = problem(api("amy").post("/api/v1/reviewer-groups", {**group, "members": ["bob"]}), 422)
    assert "bob" in body["detail"]  # a globex member, not acme's
    assert ok(api("amy").post("/api/v1/reviewer-groups", group)) == {
        "tenant": "acme",
        "name": "release-managers",
        "members": ["adam", "olga"],
    }
    ok(api("amy").post("/api/v1/reviewer-groups", {**group, "members": ["adam"]}))
    assert ok(api("amy").get("/api/v1/reviewer-groups"))[0]["members"] == ["adam"]
    assert ok(api("olga").get("/api/v1/reviewer-groups")) == []
    changed = AuditEvent.objects.filter(action="approval.group_changed").order_by("seq")
    assert [e.data["members"] for e in changed] == [["adam", "olga"], ["adam"]]


def test_a_tenant_admin_deletes_a_rule_through_the_api_and_gates_fall_back_to_the_default(
    api: Any, release_managers: list[Any]
) -> None:
    rule = ok(api("amy").post("/api/v1/approval-policies", PRODUCTION_RULE), 201)
    path = f"/api/v1/approval-policies/{rule['id']}"
    problem(api("olga").client.delete(path), 403)  # an operator, not the tenant's admin
    problem(api("bob").client.delete(path), 404)  # another tenant's member
    assert api("amy").client.delete(path).status_code == 204
    problem(api("amy").client.delete(path), 404)  # nothing active left
    assert ok(api("amy").get("/api/v1/approval-policies")) == []
    assert resolve_default("production")["required"] == 1
    deleted = AuditEvent.objects.filter(action="approval.policy_changed").order_by("seq").last()
    assert deleted is not None and (deleted.data["deleted"], deleted.data["version"]) == (True, 2)
