"""The dashboard's listing query held to the access table: one row per actor × tenant × grant.

For each row the tasks list (``queries.task_page``, the dashboard's list) of the tenant shows
exactly the tasks the row names, those are exactly the tasks ``access.can(user, VIEW, task)``
allows, and the doorway ``access.task_for`` agrees on every task (the task, or TaskHidden).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.urls import reverse

from mcptasks import access, limits, queries
from mcptasks.models import Membership, Role, Tenant

pytestmark = pytest.mark.django_db

ACME, GLOBEX = "acme", "globex"

# (actor, grant, tenant listed, the tasks the list shows). a1: alice's, a2: adam's (acme);
# g1: bob's (globex). dave holds a view delegation on a1, dana an answer delegation on a1.
TABLE = [
    ("alice", "owner", ACME, {"a1"}),
    ("alice", "owner", GLOBEX, set()),
    ("adam", "member of the same tenant", ACME, {"a2"}),
    ("adam", "member of the same tenant", GLOBEX, set()),
    ("carl", "auditor", ACME, {"a1", "a2"}),
    ("carl", "auditor", GLOBEX, {"g1"}),
    ("amy", "admin", ACME, {"a1", "a2"}),
    ("amy", "admin", GLOBEX, set()),
    ("oscar", "operator", ACME, {"a1", "a2"}),
    ("oscar", "operator", GLOBEX, set()),
    ("olga", "staff operator", ACME, {"a1", "a2"}),
    ("olga", "staff operator", GLOBEX, {"g1"}),
    ("dave", "delegated view", ACME, {"a1"}),
    ("dave", "delegated view", GLOBEX, set()),
    ("dana", "delegated answer", ACME, {"a1"}),
    ("dana", "delegated answer", GLOBEX, set()),
    ("bob", "member of another tenant", ACME, set()),
    ("bob", "member of another tenant", GLOBEX, {"g1"}),
    ("ina", "inactive user", ACME, set()),
    ("ina", "inactive user", GLOBEX, set()),
    ("anonymous", "anonymous", ACME, set()),
    ("anonymous", "anonymous", GLOBEX, set()),
]


@pytest.fixture
def scene(cast: Any, make_task: Any) -> dict[str, Any]:
    """The cast's tasks and the extra actors of the table (an operator who is not staff, two
    delegates, an inactive operator)."""
    users = get_user_model().objects
    acme = Tenant.objects.get(slug=ACME)
    tasks = {"a1": make_task("alice"), "a2": make_task("adam"), "g1": make_task("bob")}
    extra = {"oscar": Role.OPERATOR, "dave": Role.MEMBER, "dana": Role.MEMBER, "ina": Role.OPERATOR}
    for name, role in extra.items():
        Membership.objects.create(user=users.create(username=name), tenant=acme, role=role)
    users.filter(username="ina").update(is_active=False)
    access.assign_delegation(
        grantee=users.get(username="dave"), task=tasks["a1"], delegation="view"
    )
    access.assign_delegation(
        grantee=users.get(username="dana"), task=tasks["a1"], delegation="answer"
    )
    return {"tasks": tasks, "tenants": {t.slug: t.pk for t in Tenant.objects.all()}}


def _fresh(name: str) -> Any:
    """The actor as a new request sees them (nothing read of their roles yet)."""
    if name == "anonymous":
        return AnonymousUser()
    return get_user_model().objects.get(username=name)


def _named(scene: dict[str, Any], rows: list[Any]) -> set[str]:
    names = {task.pk: name for name, task in scene["tasks"].items()}
    return {names[task.pk] for task in rows}


@pytest.mark.parametrize(("actor", "grant", "tenant", "shown"), TABLE)
def test_the_task_list_shows_exactly_what_access_allows(
    scene: dict[str, Any], actor: str, grant: str, tenant: str, shown: set[str]
) -> None:
    tenant_id = scene["tenants"][tenant]
    page = queries.task_page(_fresh(actor), queries.TaskFilters(tenant_id=tenant_id))
    assert _named(scene, page.rows) == shown, grant
    allowed = {
        name
        for name, task in scene["tasks"].items()
        if task.tenant_id == tenant_id and access.can(_fresh(actor), access.Action.VIEW, task)
    }
    assert allowed == shown, grant


@pytest.mark.parametrize("actor", sorted({row[0] for row in TABLE}))
def test_every_tenant_listed_together_is_the_union_of_the_rows(
    scene: dict[str, Any], actor: str
) -> None:
    page = queries.task_page(_fresh(actor), queries.TaskFilters())
    assert _named(scene, page.rows) == set().union(*(r[3] for r in TABLE if r[0] == actor))
    cold = access.visible_tasks(_fresh(actor))  # one statement, nothing read of the user yet
    assert _named(scene, list(cold)) == _named(scene, page.rows)


@pytest.mark.parametrize("actor", sorted({row[0] for row in TABLE}))
def test_the_doorway_agrees_with_the_list_on_every_task(
    scene: dict[str, Any], actor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "check_unknown_lookup", lambda **_: None)
    listed = set().union(*(r[3] for r in TABLE if r[0] == actor))
    for name, task in scene["tasks"].items():
        try:
            found = access.task_for(_fresh(actor), task.pk)
        except access.TaskHidden:
            assert name not in listed, (actor, name)
        else:
            assert found == task and name in listed, (actor, name)


def test_the_dashboard_list_page_is_the_same_listing(scene: dict[str, Any], client: Any) -> None:
    client.force_login(_fresh("dave"))
    response = client.get(reverse("dashboard:tasks"))  # dave's one tenant: acme
    assert _named(scene, response.context["page"].rows) == {"a1"}
