"""One audit actor rule for every channel (access.actor): the same action records the same
actor kind whether it came through the dashboard or the REST API."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from audit.models import AuditEvent
from mcptasks import access
from mcptasks.models import ApiToken, Membership, Role

pytestmark = pytest.mark.django_db


def _cancel_kind(task: Any) -> str:
    [event] = AuditEvent.objects.filter(task_id=task.pk, action="task.cancel_requested")
    return event.actor_kind


@pytest.mark.parametrize(
    ("name", "kind"), [("alice", "user"), ("amy", "user"), ("olga", "operator")]
)
def test_a_cancel_records_the_same_actor_kind_through_the_dashboard_and_the_rest_api(
    cast: Any, client_for: Any, running: Any, name: str, kind: str
) -> None:
    by_dashboard, by_rest = running("alice"), running("alice")
    client_for(name).post(reverse("dashboard:cancel", args=[by_dashboard.pk]), {"reason": "r"})
    api = APIClient()
    token = ApiToken.issue(
        user=cast[name]["user"], tenant=cast["alice"]["tenant"], name="api", scopes=["api"]
    )[1]
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    reply = api.post(f"/api/v1/tasks/{by_rest.pk}/cancel", {"reason": "r"}, format="json")
    assert reply.status_code == 200, reply.content
    assert _cancel_kind(by_dashboard) == _cancel_kind(by_rest) == kind


def test_access_actor_names_one_kind_for_the_dashboard_and_rest_channels(
    users: Any, make_task: Any
) -> None:
    task = make_task("alice")
    acme = task.tenant_id
    for name in ("alice", "adam", "amy", "olga", "carl"):
        user = users[name]
        for scope in ({"task": task}, {"tenant_id": acme}, {}):
            kinds = {access.actor(user, channel, **scope).kind for channel in ("dashboard", "rest")}
            assert len(kinds) == 1, (name, scope, kinds)
    assert access.actor(users["olga"], "rest", task).kind == "operator"
    assert access.actor(users["olga"], "rest", tenant_id=acme).kind == "operator"
    assert access.actor(users["amy"], "dashboard", tenant_id=acme).kind == "user"
    assert access.actor(users["alice"], "dashboard", task).kind == "user"
    assert access.actor(users["olga"], "mcp", task).kind == "principal"  # MCP: the session's
    assert access.actor(users["olga"], "mcp").display == "olga"


def test_an_operator_elsewhere_acts_as_a_user_in_a_tenant_where_they_are_not_one(
    users: Any, make_task: Any
) -> None:
    task = make_task("alice")
    Membership.objects.filter(user=users["olga"], tenant_id=task.tenant_id).update(role=Role.ADMIN)
    olga = type(users["olga"]).objects.get(pk=users["olga"].pk)
    assert access.actor(olga, "dashboard", tenant_id=task.tenant_id).kind == "user"
    assert access.actor(olga, "rest", task).kind == "user"
    assert access.actor(olga, "dashboard").kind == "operator"  # no tenant named: any tenant


def test_access_actor_refuses_an_unknown_channel(users: Any) -> None:
    with pytest.raises(ValueError, match="unknown channel"):
        access.actor(users["alice"], "email")


@pytest.mark.parametrize(("name", "kind"), [("amy", "user"), ("olga", "operator")])
def test_a_token_revoke_records_the_same_actor_kind_through_the_dashboard_and_the_rest_api(
    cast: Any, client_for: Any, name: str, kind: str
) -> None:
    """A task-less action (revoking a member's token) names its actor by the same rule on both
    channels."""
    tenant = cast["alice"]["tenant"]
    by_dashboard = ApiToken.issue(user=cast["alice"]["user"], tenant=tenant, name="d")[0]
    by_rest = ApiToken.issue(user=cast["alice"]["user"], tenant=tenant, name="r")[0]
    client_for(name).post(
        reverse("dashboard:token_revoke", args=[by_dashboard.pk]), {"reason": "r"}
    )
    api = APIClient()
    secret = ApiToken.issue(user=cast[name]["user"], tenant=tenant, name="api", scopes=["api"])[1]
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    reply = api.post(f"/api/v1/tokens/{by_rest.pk}/revoke", {"reason": "r"}, format="json")
    assert reply.status_code == 200, reply.content
    kinds = {
        event.data["id"]: event.actor_kind
        for event in AuditEvent.objects.filter(action="token.revoked")
    }
    assert kinds == {by_dashboard.pk: kind, by_rest.pk: kind}
