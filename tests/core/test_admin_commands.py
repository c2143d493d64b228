"""Administration without the demo: create a tenant, give a user a role, issue a token with
chosen scopes (shown once) — each audited, each refusing bad input with a clear message."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from audit.models import AuditEvent
from mcptasks.auth import authenticate_bearer
from mcptasks.models import ApiToken, Membership, Tenant

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def refused(*args: str) -> str:
    with pytest.raises(CommandError) as error:
        call_command(*args, stdout=io.StringIO(), stderr=io.StringIO())
    return str(error.value)


def test_create_tenant_creates_and_audits_it(db: Any) -> None:
    assert "tenant initech (Initech) created" in run(
        "create_tenant", "initech", "--name", "Initech"
    )
    tenant = Tenant.objects.get(slug="initech")
    assert tenant.name == "Initech"
    event = AuditEvent.objects.get(action="tenant.created")
    assert event.chain == "tenant:initech"
    assert (event.actor_kind, event.actor_display) == ("system", "manage.py create_tenant")


def test_create_tenant_refuses_a_taken_or_invalid_slug(cast: Any) -> None:
    assert "already exists" in refused("create_tenant", "acme")
    assert "slug" in refused("create_tenant", "not a slug!")
    assert Tenant.objects.count() == 2
    assert not AuditEvent.objects.filter(action="tenant.created").exists()


def test_add_member_creates_a_user_without_a_password_and_audits_the_role(cast: Any) -> None:
    output = run("add_member", "dora", "--tenant", "acme", "--role", "operator", "--create")
    assert "user dora created" in output and "role operator in acme added" in output
    dora = get_user_model().objects.get(username="dora")
    assert not dora.has_usable_password()
    assert Membership.objects.filter(user=dora, tenant__slug="acme", role="operator").exists()
    event = AuditEvent.objects.get(action="membership.added")
    assert event.data == {"user": "dora", "user_id": dora.pk, "role": "operator"}
    # Again: nothing new, nothing audited.
    assert "already held" in run("add_member", "dora", "--tenant", "acme", "--role", "operator")
    assert AuditEvent.objects.filter(action="membership.added").count() == 1


def test_add_member_reads_a_password_from_stdin(cast: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("a-long-enough-password\n"))
    run(
        "add_member",
        "erin",
        "--tenant",
        "globex",
        "--role",
        "auditor",
        "--create",
        "--password-stdin",
    )
    assert get_user_model().objects.get(username="erin").check_password("a-long-enough-password")


def test_add_member_refuses_bad_input(cast: Any, monkeypatch: Any) -> None:
    assert "no tenant 'acmee'" in refused(
        "add_member", "alice", "--tenant", "acmee", "--role", "member"
    )
    assert "no user 'nobody'" in refused(
        "add_member", "nobody", "--tenant", "acme", "--role", "member"
    )
    assert "invalid choice" in refused("add_member", "alice", "--tenant", "acme", "--role", "king")
    monkeypatch.setattr("sys.stdin", io.StringIO("short\n"))
    assert "too short" in refused(
        "add_member", "fred", "--tenant", "acme", "--role", "member", "--create", "--password-stdin"
    )
    assert not get_user_model().objects.filter(username__in=["nobody", "fred"]).exists()
    assert not AuditEvent.objects.filter(action="membership.added").exists()


def test_issue_token_prints_a_working_secret_once_with_the_chosen_scopes(cast: Any) -> None:
    output = run("issue_token", "alice", "--tenant", "acme", "--scope", "api", "--scope", "mcp")
    secret = output.strip().splitlines()[-1]
    assert secret.startswith("mcpt_") and "scopes api mcp" in output
    token = ApiToken.objects.get(lookup=secret.split("_")[1])
    assert token.scopes == ["api", "mcp"]
    assert secret not in str(list(AuditEvent.objects.values("data")))
    event = AuditEvent.objects.get(action="token.issued")
    assert event.actor_display == "manage.py issue_token" and event.data["scopes"] == ["api", "mcp"]
    assert authenticate_bearer(f"Bearer {secret}").user.username == "alice"
    rest = APIClient()
    rest.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert rest.get("/api/v1/tasks").status_code == 200


def test_issue_token_quiet_prints_only_the_secret_and_defaults_to_mcp(cast: Any) -> None:
    secret = run("issue_token", "bob", "--tenant", "globex", "--quiet").strip()
    assert "\n" not in secret and secret.startswith("mcpt_")
    assert ApiToken.objects.get(lookup=secret.split("_")[1]).scopes == ["mcp"]


def test_issue_token_refuses_bad_input(cast: Any) -> None:
    before = ApiToken.objects.count()
    assert "not a member of 'globex'" in refused("issue_token", "alice", "--tenant", "globex")
    assert "no tenant 'acmee'" in refused("issue_token", "alice", "--tenant", "acmee")
    assert "no user 'nobody'" in refused("issue_token", "nobody", "--tenant", "acme")
    assert "invalid choice" in refused(
        "issue_token", "alice", "--tenant", "acme", "--scope", "root"
    )
    assert "at least 1" in refused(
        "issue_token", "alice", "--tenant", "acme", "--expires-in-days", "0"
    )
    assert ApiToken.objects.count() == before
    assert not AuditEvent.objects.filter(action="token.issued").exists()
