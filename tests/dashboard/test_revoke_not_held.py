"""Revoking a delegation the user does not hold: a clear 404 page, and nothing written."""

from __future__ import annotations

import html

import pytest
from django.urls import reverse

from audit.models import AuditEvent
from mcptasks import access
from mcptasks.outbox.models import Delivery

pytestmark = pytest.mark.django_db


def test_dashboard_revoke_of_a_delegation_not_held_says_so_and_writes_nothing(
    cast, client_for, make_task, users
):
    task = make_task("alice")
    olga = client_for("olga")
    url = reverse("dashboard:revoke", args=[task.pk])
    olga.post(
        reverse("dashboard:grant", args=[task.pk]),
        {"grantee": str(users["adam"].pk), "delegation": "view"},
    )
    audited, deliveries = AuditEvent.objects.count(), Delivery.objects.count()

    response = olga.post(url, {"grantee": str(users["adam"].pk), "delegation": "answer"})

    assert response.status_code == 404
    assert "Nothing changed: 'adam' holds no answer delegation on this task." in html.unescape(
        response.content.decode()
    )
    assert not AuditEvent.objects.filter(action="delegation.revoked").exists()
    assert (AuditEvent.objects.count(), Delivery.objects.count()) == (audited, deliveries)
    assert access.delegations_of(task) == [(users["adam"], "view")]
