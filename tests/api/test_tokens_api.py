"""API tokens through the REST API: issue (secret shown once), list, revoke — in a tenant, by
its admins and operators (and the owner, for their own tokens)."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from audit.models import AuditEvent
from mcptasks.models import ApiToken
from tests.api.conftest import ok, problem

pytestmark = pytest.mark.django_db
TOKENS = "/api/v1/tokens"
ISSUE = f"{TOKENS}/issue"


def bearer(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def revoke_path(token_id: int) -> str:
    return f"{TOKENS}/{token_id}/revoke"


def test_admin_issues_a_token_whose_secret_is_shown_once_and_works(api: Any) -> None:
    response = api("amy").post(ISSUE, {"name": "ci", "scopes": ["api", "mcp"]})
    issued = ok(response, 201)
    assert response["Cache-Control"] == "no-store"
    assert issued["tenant"] == "acme" and issued["user"] == "amy"
    assert issued["scopes"] == ["api", "mcp"] and issued["active"] is True
    assert issued["secret"].startswith(issued["prefix"])
    token = ApiToken.objects.get(pk=issued["id"])
    assert issued["secret"] not in (token.secret_hash, token.lookup)
    assert bearer(issued["secret"]).get("/api/v1/tasks").status_code == 200
    listed = {row["id"]: row for row in ok(api("amy").get(TOKENS))["results"]}
    assert "secret" not in listed[issued["id"]]
    event = AuditEvent.objects.get(action="token.issued", data__id=issued["id"])
    assert event.chain == "tenant:acme" and event.actor_display == "amy"
    assert issued["secret"] not in str(event.data)


def test_operator_issues_in_either_of_her_tenants(api: Any) -> None:
    assert ok(api("olga").post(ISSUE, {"tenant": "globex"}), 201)["tenant"] == "globex"
    assert ok(api("olga").post(ISSUE, {}), 201)["tenant"] == "acme"


def test_members_and_auditors_do_not_issue(api: Any) -> None:
    for name in ("alice", "carl", "bob"):
        problem(api(name).post(ISSUE, {}), 403)


def test_admin_of_acme_cannot_reach_globex_tokens(api: Any, cast: dict[str, Any]) -> None:
    problem(api("amy").post(ISSUE, {"tenant": "globex"}), 404)
    listed = ok(api("amy").get(TOKENS))["results"]
    assert listed and {row["tenant"] for row in listed} == {"acme"}
    assert ok(api("amy").get(TOKENS, tenant="globex"))["results"] == []
    bobs = ApiToken.objects.filter(user__username="bob").first()
    assert bobs is not None
    problem(api("amy").post(revoke_path(bobs.pk)), 404)
    assert ApiToken.objects.get(pk=bobs.pk).revoked_at is None


def test_members_list_only_their_own_tokens(api: Any) -> None:
    for name in ("alice", "bob"):
        rows = ok(api(name).get(TOKENS))["results"]
        assert rows and {row["user"] for row in rows} == {name}


def test_admin_revokes_a_members_token_which_then_stops_working(
    api: Any, api_tokens: dict[str, str]
) -> None:
    alices = ApiToken.objects.get(user__username="alice", scopes=["api"])
    revoked = ok(api("amy").post(revoke_path(alices.pk), {"reason": "laptop lost"}))
    assert revoked["revoked_at"] and revoked["active"] is False
    problem(bearer(api_tokens["alice"]).get("/api/v1/tasks"), 401)
    ok(api("amy").post(revoke_path(alices.pk)))  # again: nothing changes
    events = AuditEvent.objects.filter(action="token.revoked", data__id=alices.pk)
    assert events.count() == 1 and events.get().data["reason"] == "laptop lost"


def test_owner_revokes_her_own_token_but_not_others(api: Any) -> None:
    adams = ApiToken.objects.filter(user__username="adam").first()
    assert adams is not None
    problem(api("alice").post(revoke_path(adams.pk)), 404)
    problem(api("carl").post(revoke_path(adams.pk)), 404)
    own = ApiToken.objects.filter(user__username="alice", scopes=["mcp"]).get()
    assert ok(api("alice").post(revoke_path(own.pk)))["active"] is False


@pytest.mark.parametrize(
    "body, field",
    [
        ({"scopes": ["root"]}, "scopes"),
        ({"scopes": []}, "scopes"),
        ({"expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
        ({"name": "x" * 101}, "name"),
    ],
)
def test_issue_refuses_invalid_input(api: Any, body: dict[str, Any], field: str) -> None:
    assert field in problem(api("amy").post(ISSUE, body), 422)["errors"]


def test_revoke_of_unknown_token_is_404(api: Any) -> None:
    problem(api("amy").post(revoke_path(987654)), 404)
    problem(api("amy").post(f"{TOKENS}/abc/revoke"), 404)
