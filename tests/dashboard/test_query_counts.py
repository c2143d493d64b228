"""No N+1: the inbox, the tasks list, the task detail and the audit list run a constant number of
queries — the same bound with a few rows and with many."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from audit.record import Actor
from mcptasks import lifecycle
from mcptasks.models import Audience, Membership, Role, Task, Tenant
from mcptasks.task_ids import distinctive

pytestmark = pytest.mark.django_db

# Session and user (2), navigation (tenants, roles, staff check, three inbox counts), and the
# page's own queries: generous enough for refactoring, far below one query per row. +1 each
# (issue 21): the inbox count reads the pending approval gates to check them against their
# policies (access.answerable_inputs) — one query, whatever the number of rows.
INBOX_MAX = 14
LIST_MAX = 14
DETAIL_MAX = 26
AUDIT_MAX = 14


def queries_of(client: Client, url: str, **params: Any) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, params)
    assert response.status_code == 200, response.status_code
    return len(captured.captured_queries)


def _fill_inbox(
    count: int,
    awaiting: Callable[..., Task],
    unknown_effect: Callable[..., Task],
    running: Callable[..., Task],
    users: dict[str, Any],
) -> None:
    for number in range(count):
        owner = "alice" if number % 2 else "bob"
        awaiting(owner)
        awaiting(owner, audience=Audience.ANY, forbid_self_approval=False, key="choice")
        unknown_effect(owner)
        task = running(owner)
        lifecycle.task_request_cancel(
            task_id=task.pk, actor=Actor.for_user(users["amy"]), reason="stop"
        )
        Task.objects.filter(pk=task.pk).update(
            cancel_requested_at=Task.objects.get(pk=task.pk).cancel_requested_at.replace(year=2020)
        )


def test_inbox_queries_do_not_grow_with_rows(
    cast, client_for, awaiting, unknown_effect, running, users, django_assert_max_num_queries
):
    olga = client_for("olga")
    _fill_inbox(2, awaiting, unknown_effect, running, users)
    every_tenant = {"tenant": ""}  # olga's inbox across acme and globex
    few = queries_of(olga, reverse("dashboard:inbox"), **every_tenant)
    _fill_inbox(12, awaiting, unknown_effect, running, users)
    with django_assert_max_num_queries(INBOX_MAX):
        response = olga.get(reverse("dashboard:inbox"), every_tenant)
    assert response.context["inbox"].total == 14 * 4
    assert queries_of(olga, reverse("dashboard:inbox"), **every_tenant) == few
    for name in ("alice", "carl", "olga"):  # olga: in her tenant, with the other's count
        client = client_for(name)
        with django_assert_max_num_queries(INBOX_MAX):
            client.get(reverse("dashboard:inbox"))
    fragment = queries_of(olga, reverse("dashboard:inbox"), fragment="1", **every_tenant)
    assert fragment <= few


@pytest.mark.parametrize("viewer", ["olga", "alice", "carl"])
def test_task_list_queries_do_not_grow_with_rows(
    cast, client_for, make_task, users, viewer, django_assert_max_num_queries
):
    client = client_for(viewer)
    for _ in range(3):
        make_task("alice")
    few = queries_of(client, reverse("dashboard:tasks"))
    for number in range(60):
        make_task("alice" if number % 3 else "adam")
    with django_assert_max_num_queries(LIST_MAX):
        response = client.get(reverse("dashboard:tasks"))
    assert len(response.context["page"].rows) >= (40 if viewer == "alice" else 50)
    assert queries_of(client, reverse("dashboard:tasks")) == few
    older = response.context["page"].older
    with django_assert_max_num_queries(LIST_MAX):
        client.get(reverse("dashboard:tasks"), {"older": older} if older else {})
    with django_assert_max_num_queries(LIST_MAX):  # every tenant: one query per tenant
        client.get(reverse("dashboard:tasks"), {"tenant": ""})


def _busy_task(make_task: Callable[..., Task], users: dict[str, Any], size: int) -> Task:
    """A task with ``size`` of everything the detail page lists: pending and answered input
    requests of every audience, effects, delegations, and audit events."""
    task = make_task("alice")
    task = lifecycle.task_claim(task_id=task.pk, worker="w")
    for number in range(size):
        lifecycle.task_effect_intended(
            task_id=task.pk,
            attempt=task.attempt,
            step=f"step-{number}",
            idempotency_key=f"k{number}",
            idempotent=True,
        )
        lifecycle.task_effect_applied(
            task_id=task.pk,
            attempt=task.attempt,
            step=f"step-{number}",
            result={"n": number},
            external_ref=f"ref-{number}",
        )
    # Every (audience, self-approval) case stays pending; the rest are answered.
    audiences = [Audience.OPERATOR, Audience.ANY, Audience.CLIENT]
    specs = [
        lifecycle.InputSpec(
            key=f"q{number}",
            method="elicitation/create",
            params={
                "message": f"Question {number}?",
                "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
            },
            audience=audiences[number % 3],
            forbid_self_approval=(number // 3) % 2 == 0,
        )
        for number in range(6 + size * 2)
    ]
    task = lifecycle.task_request_input(task_id=task.pk, attempt=task.attempt, requests=specs)
    for number in range(6, 6 + size * 2):
        lifecycle.task_answer_input(
            task_id=task.pk,
            key=f"q{number}",
            response={"action": "accept", "content": {"ok": True}},
            actor=Actor.for_user(users["olga"]),
            via="dashboard",
        )
    acme = Tenant.objects.get(slug="acme")
    User = get_user_model()
    for number in range(size):
        grantee = User.objects.create(username=f"member-{distinctive(task.pk)[:6]}-{number}")
        Membership.objects.create(user=grantee, tenant=acme, role=Role.MEMBER)
        lifecycle.task_grant_delegation(
            task_id=task.pk,
            actor=Actor.for_user(users["olga"]),
            grantee=grantee,
            delegation="answer" if number % 2 else "view",
        )
    return task


@pytest.mark.parametrize("viewer", ["olga", "alice", "carl", "adam"])
def test_task_detail_queries_do_not_grow_with_rows(
    cast, client_for, make_task, users, viewer, django_assert_max_num_queries
):
    small = _busy_task(make_task, users, 1)
    large = _busy_task(make_task, users, 15)
    for task in (small, large):
        lifecycle.task_grant_delegation(
            task_id=task.pk,
            actor=Actor.for_user(users["olga"]),
            grantee=users["adam"],
            delegation="answer",
        )
    client = client_for(viewer)
    few = queries_of(client, reverse("dashboard:task", args=[small.pk]))
    with django_assert_max_num_queries(DETAIL_MAX):
        response = client.get(reverse("dashboard:task", args=[large.pk]))
    detail = response.context["detail"]
    assert len(detail.effects) == 15 and len(detail.inputs) == 36
    assert len(detail.delegations) == 16 and len(detail.timeline) > 30
    assert queries_of(client, reverse("dashboard:task", args=[large.pk])) == few
    live = queries_of(client, reverse("dashboard:task", args=[large.pk]), fragment="live")
    assert live <= few


def test_audit_list_queries_do_not_grow_with_rows(
    cast, client_for, make_task, django_assert_max_num_queries
):
    carl = client_for("carl")
    make_task("alice")
    before = len(carl.get(reverse("dashboard:audit")).context["page"].rows)
    few = queries_of(carl, reverse("dashboard:audit"))
    for _ in range(40):
        make_task("alice")
    with django_assert_max_num_queries(AUDIT_MAX):
        response = carl.get(reverse("dashboard:audit"))
    assert len(response.context["page"].rows) == before + 40
    assert queries_of(carl, reverse("dashboard:audit")) == few
