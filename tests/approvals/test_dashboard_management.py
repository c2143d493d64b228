"""Tenant admins manage approval policies and reviewer groups in the dashboard (issue 21
point 1): list, add, edit (a new version), delete a rule per tool and argument value; add and
edit groups — each change saved by approval_policies (the REST API's writer), versioned and
audited, bad input answered with form errors; members, operators and auditors without the admin
role see no such controls and are refused the URLs."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from audit.models import AuditEvent
from mcptasks.models import ApprovalPolicyRule, ReviewerGroup

pytestmark = pytest.mark.django_db

GOOD = {
    "rule-tool": "deploy_service",
    "rule-key": "approval",
    "rule-argument": "environment",
    "rule-value": "production",
    "rule-required": "2",
    "rule-groups": [],
    "rule-roles": ["operator"],
    "rule-users": "",
    "rule-redact": "version",
}


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def policy_events() -> list[dict[str, Any]]:
    rows = AuditEvent.objects.filter(action="approval.policy_changed").order_by("seq")
    return [{"by": e.actor_display, **e.data} for e in rows]


@pytest.mark.parametrize(
    ("change", "field", "error"),
    [
        ({"rule-argument": "region"}, "argument", "has no argument 'region'"),
        ({"rule-value": "prod"}, "value", "environment is one of staging, production"),
        ({"rule-value": ""}, "value", "together"),
        ({"rule-roles": []}, "roles", "at least one role"),
        ({"rule-users": "bob"}, "users", "Not members of Acme"),
        ({"rule-users": "carl"}, "users", "An auditor may not decide"),
        ({"rule-required": "0"}, "required", "greater than or equal to 1"),
        ({"rule-tool": "no_such_tool"}, "tool", "Select a valid choice"),
        ({"rule-redact": "password"}, "redact", "has no argument password"),
    ],
)
def test_a_bad_rule_is_answered_with_a_form_error_and_nothing_is_saved(
    users: dict[str, Any], change: dict[str, Any], field: str, error: str
) -> None:
    response = signed_in(users["amy"]).post(reverse("dashboard:approval_policies"), GOOD | change)
    assert response.status_code == 422
    form = response.context["rule_form"]
    assert any(error in message for message in form.errors[field]), form.errors
    assert not ApprovalPolicyRule.objects.exists() and policy_events() == []


def test_a_tenant_admin_adds_edits_and_deletes_a_rule_each_a_version_and_audited(
    users: dict[str, Any],
) -> None:
    amy = signed_in(users["amy"])
    page = amy.get(reverse("dashboard:approval_policies"))
    assert page.status_code == 200 and b"data-rule-form" in page.content
    assert b"Approval policies</a>" in page.content  # in the navigation
    assert amy.post(reverse("dashboard:approval_policies"), GOOD).status_code == 302
    rule = ApprovalPolicyRule.objects.get(active=True)
    assert (rule.version, rule.required, rule.roles, rule.redact) == (
        1,
        2,
        ["operator"],
        ["version"],
    )
    listed = amy.get(reverse("dashboard:approval_policies")).content.decode()
    assert f'data-rule="{rule.pk}"' in listed and "environment=production" in listed

    edit_url = reverse("dashboard:approval_rule", args=[rule.pk])
    assert amy.get(edit_url).status_code == 200
    bad = amy.post(edit_url, {"rule-required": "2", "rule-roles": []})
    assert bad.status_code == 422 and "at least one role" in bad.content.decode()
    tightened = {"rule-required": "3", "rule-roles": ["operator"], "rule-users": "adam"}
    # The selector is fixed while editing: a posted tool or value is ignored.
    assert amy.post(edit_url, {**tightened, "rule-value": "staging"}).status_code == 302
    current = ApprovalPolicyRule.objects.get(active=True)
    assert (current.version, current.required, current.users, current.value) == (
        2,
        3,
        ["adam"],
        "production",
    )

    delete_url = reverse("dashboard:approval_rule_delete", args=[current.pk])
    assert amy.post(delete_url).status_code == 302
    assert not ApprovalPolicyRule.objects.filter(active=True).exists()
    assert amy.post(delete_url).status_code == 404  # nothing active left to delete
    assert [(e["by"], e["version"], e.get("deleted", False)) for e in policy_events()] == [
        ("amy", 1, False),
        ("amy", 2, False),
        ("amy", 3, True),
    ]


def test_a_tenant_admin_adds_and_edits_a_reviewer_group(users: dict[str, Any]) -> None:
    amy = signed_in(users["amy"])
    create = reverse("dashboard:reviewer_groups")
    body = {"group-name": "release-managers", "group-members": ["adam", "olga"]}
    assert amy.post(create, body).status_code == 302
    group = ReviewerGroup.objects.get(name="release-managers")
    assert sorted(u.username for u in group.members.all()) == ["adam", "olga"]
    again = amy.post(create, body)
    assert again.status_code == 422 and "already has a group" in again.content.decode()
    assert amy.post(create, {"group-name": "not a slug!"}).status_code == 422
    foreign = amy.post(create, {"group-name": "other", "group-members": ["bob"]})
    assert foreign.status_code == 422  # bob is globex's: not offered, not accepted

    edit = reverse("dashboard:reviewer_group", args=["release-managers"])
    assert amy.get(edit).status_code == 200
    assert amy.post(edit, {"group-members": ["adam"]}).status_code == 302
    assert [u.username for u in group.members.all()] == ["adam"]
    changed = AuditEvent.objects.filter(action="approval.group_changed").order_by("seq")
    assert [(e.actor_display, e.data["members"]) for e in changed] == [
        ("amy", ["adam", "olga"]),
        ("amy", ["adam"]),
    ]
    assert amy.get(reverse("dashboard:reviewer_group", args=["nope"])).status_code == 404


@pytest.mark.parametrize("name", ["alice", "olga", "carl", "bob"])
def test_members_operators_and_auditors_get_no_controls_and_are_refused(
    name: str, users: dict[str, Any]
) -> None:
    amy = signed_in(users["amy"])
    amy.post(reverse("dashboard:approval_policies"), GOOD)
    amy.post(reverse("dashboard:reviewer_groups"), {"group-name": "rm", "group-members": []})
    rule = ApprovalPolicyRule.objects.get(active=True)
    client = signed_in(users[name])
    home = client.get(reverse("dashboard:tasks")).content.decode()
    assert "Approval policies" not in home and reverse("dashboard:approval_policies") not in home
    refused_rule = 404 if name == "bob" else 403  # bob is not even a member of acme
    assert client.get(reverse("dashboard:approval_policies")).status_code == 403
    assert client.post(reverse("dashboard:approval_policies"), GOOD).status_code == 403
    assert client.get(reverse("dashboard:approval_rule", args=[rule.pk])).status_code == (
        refused_rule
    )
    edit = client.post(reverse("dashboard:approval_rule", args=[rule.pk]), GOOD)
    assert edit.status_code == refused_rule
    delete = client.post(reverse("dashboard:approval_rule_delete", args=[rule.pk]))
    assert delete.status_code == refused_rule
    group = {"group-name": "x", "group-members": []}
    assert client.post(reverse("dashboard:reviewer_groups"), group).status_code == 403
    assert client.get(reverse("dashboard:reviewer_group", args=["rm"])).status_code == 403
    assert ApprovalPolicyRule.objects.filter(active=True).count() == 1
    assert ReviewerGroup.objects.count() == 1
