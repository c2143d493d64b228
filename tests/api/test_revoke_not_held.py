"""Revoking a delegation the user does not hold: 404 from REST, and nothing written."""

from __future__ import annotations

from typing import Any

import pytest

from audit.models import AuditEvent
from mcptasks.outbox.models import Delivery
from tests.api.conftest import problem

pytestmark = pytest.mark.django_db

TASKS = "/api/v1/tasks"


@pytest.mark.parametrize("user", ["adam", "no-such-user"])
def test_rest_revoke_of_a_delegation_not_held_is_404_and_writes_nothing(
    api: Any, make_task: Any, user: str
) -> None:
    task = make_task("alice")
    audited, deliveries = AuditEvent.objects.count(), Delivery.objects.count()
    path = f"{TASKS}/{task.pk}/delegations/revoke"
    body = problem(api("olga").post(path, {"user": user, "delegation": "answer"}), 404)
    assert body["detail"] == f"{user!r} holds no answer delegation on this task."
    assert not AuditEvent.objects.filter(action="delegation.revoked").exists()
    assert (AuditEvent.objects.count(), Delivery.objects.count()) == (audited, deliveries)
