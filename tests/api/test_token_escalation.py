"""Issuing a token for someone else never gives the issuer rights they do not hold."""

from __future__ import annotations

import pytest

from mcptasks import access

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("issuer", "owner", "allowed"),
    [
        ("amy", "amy", True),  # an admin's own token
        ("amy", "alice", True),  # a plain member of her tenant
        ("amy", "olga", False),  # a staff operator: would escalate to every tenant
        ("amy", "carl", False),  # auditor of globex too: a tenant amy does not administer
        ("olga", "alice", True),  # operators administer tokens of their tenants
        ("olga", "carl", True),  # carl's roles are held by olga (operator) in both tenants
        ("alice", "alice", False),  # members do not issue tokens
    ],
)
def test_token_issue_never_escalates(users, issuer, owner, allowed):
    acme = users["alice"].memberships.get().tenant
    decision = access.may_issue_token(users[issuer], tenant_id=acme.pk, owner=users[owner])
    assert bool(decision) is allowed, decision.reason
