"""Token issue/revoke and logins are audited (the system chain when no tenant is known)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import authenticate
from django.db import transaction
from django.test import Client

from audit.chain import verify_chains
from audit.models import AuditEvent
from audit.record import Actor
from mcptasks.models import ApiToken
from mcptasks.tokens import issue_token, revoke_token

pytestmark = pytest.mark.django_db


def test_issuing_a_token_is_audited_without_its_secret(cast: dict[str, Any]) -> None:
    amy, alice = cast["amy"]["user"], cast["alice"]["user"]
    token, plaintext = issue_token(
        user=alice,
        tenant=cast["alice"]["tenant"],
        actor=Actor.for_user(amy),
        name="ci bot",
        scopes=["mcp"],
    )
    event = AuditEvent.objects.get(action="token.issued")
    assert (event.chain, event.actor_display, event.task_id) == ("tenant:acme", "amy", "")
    assert event.data["id"] == token.pk and event.data["lookup"] == token.lookup
    assert event.data["owner"] == "alice" and event.data["scopes"] == ["mcp"]
    secret = plaintext.split("_", 2)[2]
    stored = str(AuditEvent.objects.values_list("data", flat=True).get(pk=event.pk))
    assert secret not in stored and token.secret_hash not in stored


def test_revoking_a_token_is_audited_once(cast: dict[str, Any]) -> None:
    token = ApiToken.objects.get(user=cast["bob"]["user"])
    olga = Actor.for_user(cast["olga"]["user"], kind="operator")
    revoked = revoke_token(token_id=token.pk, actor=olga, reason="leaked in a log")
    assert revoked.revoked_at is not None and not revoked.is_active()
    again = revoke_token(token_id=token.pk, actor=olga)
    assert again.revoked_at == revoked.revoked_at
    event = AuditEvent.objects.get(action="token.revoked")
    assert (event.chain, event.actor_kind, event.data["reason"]) == (
        "tenant:globex",
        "operator",
        "leaked in a log",
    )


def test_a_token_issue_rolled_back_leaves_no_token_and_no_event(cast: dict[str, Any]) -> None:
    before = ApiToken.objects.count()
    with pytest.raises(RuntimeError), transaction.atomic():
        issue_token(user=cast["bob"]["user"], tenant=cast["bob"]["tenant"], actor=Actor.system())
        raise RuntimeError("the caller failed after issuing")
    assert ApiToken.objects.count() == before
    assert not AuditEvent.objects.filter(action="token.issued").exists()


def test_login_and_logout_are_audited_in_each_tenant_of_the_user(cast: dict[str, Any]) -> None:
    client = Client(REMOTE_ADDR="203.0.113.9")
    assert client.login(username="olga", password=cast["olga"]["password"])
    client.logout()
    events = list(
        AuditEvent.objects.filter(action__startswith="auth.")
        .order_by("action", "chain")
        .values_list("action", "chain", "actor_display")
    )
    assert events == [
        ("auth.login", "tenant:acme", "olga"),
        ("auth.login", "tenant:globex", "olga"),
        ("auth.logout", "tenant:acme", "olga"),
        ("auth.logout", "tenant:globex", "olga"),
    ]
    login = AuditEvent.objects.filter(action="auth.login").first()
    assert login is not None and login.data["username"] == "olga"


def test_failed_login_of_a_known_user_goes_to_their_tenant(cast: dict[str, Any]) -> None:
    assert authenticate(username="alice", password="not-her-password") is None
    event = AuditEvent.objects.get(action="auth.login_failed")
    assert (event.chain, event.actor_kind, event.data["username"]) == (
        "tenant:acme",
        "anonymous",
        "alice",
    )
    assert "not-her-password" not in str(event.data)


def test_failed_login_of_an_unknown_user_goes_to_the_system_chain(cast: dict[str, Any]) -> None:
    Client().login(username="mallory", password="guess")
    event = AuditEvent.objects.get(action="auth.login_failed")
    assert (event.chain, event.tenant_id, event.data["username"]) == ("system", None, "mallory")
    assert all(report.ok for report in verify_chains())


def test_login_of_a_user_without_tenant_goes_to_the_system_chain(db: Any) -> None:
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user(username="root", password="root-pass-123")
    assert Client().login(username="root", password="root-pass-123")
    assert AuditEvent.objects.get(action="auth.login").chain == "system"
