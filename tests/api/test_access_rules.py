"""The access rule the REST API added to access.py, as a table (STYLE rule 5)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from mcptasks import access
from mcptasks.models import Membership, Role, Tenant

pytestmark = pytest.mark.django_db

# (user, tenant, may see it): members see their tenants, staff operators too only theirs.
MAY_SEE_TENANT = [
    ("alice", "acme", True),
    ("alice", "globex", False),
    ("amy", "acme", True),
    ("amy", "globex", False),
    ("bob", "globex", True),
    ("bob", "acme", False),
    ("carl", "acme", True),
    ("carl", "globex", True),
    ("olga", "acme", True),
    ("olga", "globex", True),
    ("olga", "initech", False),  # staff operator of acme and globex: not initech (issue 19)
    ("sam", "initech", False),  # staff without an operator role: no special rights
    ("ivan", "acme", False),  # an inactive member
]


@pytest.fixture
def people(users: dict[str, Any]) -> dict[str, Any]:
    User = get_user_model()
    initech = Tenant.objects.create(slug="initech", name="Initech")
    acme = Tenant.objects.get(slug="acme")
    sam = User.objects.create(username="sam", is_staff=True)
    Membership.objects.create(user=sam, tenant=acme, role=Role.AUDITOR)
    ivan = User.objects.create(username="ivan", is_active=False)
    Membership.objects.create(user=ivan, tenant=acme, role=Role.MEMBER)
    assert initech.pk
    return {**users, "sam": sam, "ivan": ivan}


@pytest.mark.parametrize("user, tenant, allowed", MAY_SEE_TENANT)
def test_may_see_tenant(people: dict[str, Any], user: str, tenant: str, allowed: bool) -> None:
    tenant_id = Tenant.objects.get(slug=tenant).pk
    assert access.may_see_tenant(people[user], tenant_id) is allowed
