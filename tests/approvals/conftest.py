"""Fixtures of the approval-gate tests (issue 21): the effect tests' fake cloud, MCP clients
and audit reader, and reviewers in a tenant reviewer group."""

from __future__ import annotations

from typing import Any

import pytest

from mcptasks.models import Membership, ReviewerGroup, Role
from tests.effects import conftest as effect_fixtures

fake_cloud_file = effect_fixtures.fake_cloud_file
plain_http = effect_fixtures.plain_http
audit_of = effect_fixtures.audit_of
mcp_for = effect_fixtures.mcp_for
# ``start()`` → alice's production deploy_service task, run until its approval gate waits.
start = effect_fixtures.start


@pytest.fixture
def release_managers(cast: dict[str, dict[str, Any]], django_user_model: Any) -> list[Any]:
    """rita, ravi and rosa: acme members in its ``release-managers`` reviewer group."""
    tenant = cast["alice"]["tenant"]
    group = ReviewerGroup.objects.create(tenant=tenant, name="release-managers")
    people = []
    for name in ("rita", "ravi", "rosa"):
        user = django_user_model.objects.create_user(username=name, password="x")
        Membership.objects.create(user=user, tenant=tenant, role=Role.MEMBER)
        group.members.add(user)
        people.append(user)
    return people
