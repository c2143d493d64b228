"""The tasks list across tenants and its total: a user who sees one tenant whole and is a plain
member of another lists the first whole and only their own tasks of the second; the total is
counted up to ``COUNT_CAP`` and said to be more beyond it."""

from __future__ import annotations

import pytest
from django.urls import reverse

from mcptasks.models import Membership, Role

pytestmark = pytest.mark.django_db


def test_a_whole_tenant_and_only_ones_own_tasks_of_a_tenant_where_one_is_a_member(
    cast, client_for, make_task
):
    amy = cast["amy"]["user"]  # acme's admin (sees acme whole), made a plain member of globex
    Membership.objects.create(user=amy, tenant=cast["bob"]["tenant"], role=Role.MEMBER)
    acme_tasks = {make_task("alice").pk, make_task("adam").pk}
    bobs = make_task("bob").pk
    globex = cast["bob"]["tenant"]
    from audit.record import Actor
    from mcptasks import lifecycle, models

    own, _ = lifecycle.task_create(
        spec=lifecycle.NewTask(
            tenant_id=globex.pk,
            principal_id=amy.pk,
            tool_name="echo_task",
            arguments={},
            policy_revision="test",
        ),
        actor=Actor.for_user(amy),
    )
    response = client_for("amy").get(reverse("dashboard:tasks"), {"tenant": ""})
    shown = {task.pk for task in response.context["page"].rows}
    assert shown == acme_tasks | {own.pk}
    assert bobs not in shown
    assert response.context["page"].total == 3
    assert models.Task.objects.count() == 4


def test_the_total_is_counted_up_to_the_cap_and_said_to_be_more_beyond_it(
    cast, client_for, make_task, monkeypatch
):
    from mcptasks import queries

    monkeypatch.setattr(queries.listing, "COUNT_CAP", 3)
    for _ in range(3):
        make_task("alice")
    olga = client_for("olga")
    exact = olga.get(reverse("dashboard:tasks"))
    assert exact.context["page"].total == 3 and not exact.context["page"].total_capped
    assert "3 tasks match" in exact.content.decode()
    make_task("alice")
    capped = olga.get(reverse("dashboard:tasks"))
    assert capped.context["page"].total_capped
    assert "More than 3 tasks match" in capped.content.decode()


def test_the_count_groups_thousands_as_the_locale_does(client_for, make_task):
    from mcptasks import queries
    from mcptasks.models import Task, new_task_id

    # Rows copied directly (as bench/page_timing.py seeds): the count is all that is looked at.
    template = make_task("alice")
    olga = client_for("olga")

    def copies(count: int) -> None:
        rows = []
        for _ in range(count):
            row = Task.objects.get(pk=template.pk)
            row.pk = new_task_id()
            rows.append(row)
        Task.objects.bulk_create(rows)

    copies(queries.COUNT_CAP - 1)
    exact = olga.get(reverse("dashboard:tasks")).content.decode()
    assert "1,000 tasks match" in exact
    copies(1)
    capped = olga.get(reverse("dashboard:tasks")).content.decode()
    assert "More than 1,000 tasks match" in capped
