"""Tenant isolation for every endpoint and method, with the cast.

alice (acme member) gets 404 for every globex object and changes nothing; carl (auditor of
both) reads tasks and audit and exports, but acts on no task; olga (operator of both) acts in
both tenants; amy administers acme tokens only (tests/api/test_tokens_api.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.urls import URLPattern, get_resolver

from audit.models import AuditEvent
from mcptasks import approval_policies, lifecycle
from mcptasks.api.urls import urlpatterns
from mcptasks.lifecycle import InputSpec
from mcptasks.models import (
    ApiToken,
    ApprovalPolicyRule,
    Effect,
    InputRequest,
    Task,
    TaskState,
    Tenant,
)
from tests.api.conftest import ok, problem

pytestmark = pytest.mark.django_db
S = TaskState
V1 = "/api/v1"
OPERATOR_GATE = [
    InputSpec(
        key="approve", method="elicitation/create", params={"message": "Go?"}, audience="operator"
    )
]


@dataclass
class World:
    """Per tenant: a task waiting for an operator (request ``approve``), one whose effect is
    unknown; carl holds a view delegation on each gate; olga exported globex's audit."""

    gate: dict[str, Task]
    unknown: dict[str, Task]
    export: dict[str, Any]
    bob_token: ApiToken
    rule: ApprovalPolicyRule  # globex's approval policy rule
    # Per tenant: an event destination and a dead-lettered delivery of it (issue 24).
    destination: dict[str, Any] = field(default_factory=dict)
    dead: dict[str, Any] = field(default_factory=dict)

    def effect_id(self, tenant: str) -> int:
        return Effect.objects.get(task=self.unknown[tenant]).pk


@pytest.fixture
def world(task_in: Any, api: Any, users: dict[str, Any], actors: dict[str, Any]) -> World:
    owners = {"acme": "alice", "globex": "bob"}
    gate = {
        t: task_in(S.AWAITING_OPERATOR, owner=o, requests=OPERATOR_GATE) for t, o in owners.items()
    }
    unknown = {t: task_in(S.NEEDS_RECONCILIATION, owner=o) for t, o in owners.items()}
    for task in gate.values():
        lifecycle.task_grant_delegation(
            task_id=task.pk, actor=actors["olga"], grantee=users["carl"], delegation="view"
        )
    export = ok(api("olga").post(f"{V1}/audit/exports", {"tenant": "globex"}), 201)
    bob_token = ApiToken.objects.filter(user=users["bob"]).first()
    assert bob_token is not None
    rule = approval_policies.save_rule(
        tenant=Tenant.objects.get(slug="globex"),
        actor=actors["olga"],
        created_by=None,
        tool_name="deploy_service",
        roles=["operator"],
    )
    destination, dead = destinations_with_dead_letters(users)
    return World(
        gate=gate,
        unknown=unknown,
        export=export,
        bob_token=bob_token,
        destination=destination,
        dead=dead,
        rule=rule,
    )


def destinations_with_dead_letters(users: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    from audit.record import Actor
    from mcptasks.models import Delivery, DeliveryState, Tenant
    from mcptasks.outbox import destinations
    from mcptasks.sinks.webhook import new_secret

    made, dead = {}, {}
    for slug in ("acme", "globex"):
        tenant = Tenant.objects.get(slug=slug)
        made[slug] = destinations.create(
            tenant=tenant,
            actor=Actor.for_user(users["olga"]),
            created_by=users["olga"],
            name=f"{slug} hooks",
            kind="webhook",
            config={"url": "http://127.0.0.1:9/hook"},
            secret=new_secret(),
            events=["task.completed"],
        )
        dead[slug] = Delivery.objects.create(
            destination=made[slug],
            tenant=tenant,
            event_id=f"evt_{slug}",
            event_type="task.completed",
            ordering_key="task:x",
            state=DeliveryState.DEAD,
        )
    return made, dead


def snapshot(tenant_slug: str) -> dict[str, Any]:
    """Everything an action on the tenant could change."""
    from mcptasks.models import TaskUserObjectPermission

    return {
        "tasks": list(Task.objects.filter(tenant__slug=tenant_slug).order_by("pk").values()),
        "inputs": list(
            InputRequest.objects.filter(tenant__slug=tenant_slug).order_by("pk").values()
        ),
        "effects": list(Effect.objects.filter(tenant__slug=tenant_slug).order_by("pk").values()),
        "tokens": list(
            ApiToken.objects.filter(tenant__slug=tenant_slug)
            .order_by("pk")
            .values("pk", "revoked_at")
        ),
        "grants": TaskUserObjectPermission.objects.filter(
            content_object__tenant__slug=tenant_slug
        ).count(),
        "audit": AuditEvent.objects.filter(chain=f"tenant:{tenant_slug}").count(),
        "rules": list(
            ApprovalPolicyRule.objects.filter(tenant__slug=tenant_slug).order_by("pk").values()
        ),
    }


# (route name, method, path, body) — one line per operation on one tenant's objects.
Case = tuple[str, str, Callable[[World, str], str], Any]
TASK_CASES: list[Case] = [
    ("api-task", "get", lambda w, t: f"{V1}/tasks/{w.gate[t].pk}", None),
    (
        "api-task-answer",
        "post",
        lambda w, t: f"{V1}/tasks/{w.gate[t].pk}/input-requests/approve/answer",
        {"response": {"action": "accept", "content": {}}},
    ),
    ("api-task-cancel", "post", lambda w, t: f"{V1}/tasks/{w.gate[t].pk}/cancel", {}),
    (
        "api-task-force-cancel",
        "post",
        lambda w, t: f"{V1}/tasks/{w.gate[t].pk}/force-cancel",
        {"reason": "isolation test"},
    ),
    (
        "api-task-reconcile",
        "post",
        lambda w, t: f"{V1}/tasks/{w.unknown[t].pk}/effects/{w.effect_id(t)}/reconcile",
        {"decision": "not_applied", "reason": "isolation test"},
    ),
    (
        "api-task-grant",
        "post",
        lambda w, t: f"{V1}/tasks/{w.gate[t].pk}/delegations/grant",
        # carl is an auditor: he may be named viewer, never approver (issue 21).
        {"user": "carl", "delegation": "view"},
    ),
    (
        "api-task-revoke",
        "post",
        lambda w, t: f"{V1}/tasks/{w.gate[t].pk}/delegations/revoke",
        {"user": "carl", "delegation": "view"},
    ),
]
OTHER_CASES: list[Case] = [
    (
        "api-approval-decide",
        "post",
        lambda w, t: f"{V1}/approvals/{w.gate[t].pk}/approve/decisions",
        {"verdict": "approve"},
    ),
    ("api-audit-exports", "post", lambda w, t: f"{V1}/audit/exports", {"tenant": "globex"}),
    ("api-audit-export-file", "get", lambda w, t: w.export["file"], None),
    ("api-audit-export-manifest", "get", lambda w, t: w.export["manifest_url"], None),
    ("api-tokens-issue", "post", lambda w, t: f"{V1}/tokens/issue", {"tenant": "globex"}),
    ("api-token-revoke", "post", lambda w, t: f"{V1}/tokens/{w.bob_token.pk}/revoke", {}),
    ("api-approval-policy", "delete", lambda w, t: f"{V1}/approval-policies/{w.rule.pk}", None),
    ("api-destination", "get", lambda w, t: f"{V1}/destinations/{w.destination[t].pk}", None),
    (
        "api-destination-deliveries",
        "get",
        lambda w, t: f"{V1}/destinations/{w.destination[t].pk}/deliveries",
        None,
    ),
    (
        "api-destination-redeliver",
        "post",
        lambda w, t: f"{V1}/destinations/{w.destination[t].pk}/deliveries/{w.dead[t].pk}/redeliver",
        {},
    ),
]
# Lists are not objects: they show alice nothing of globex (or refuse her outright).
LIST_CASES = [
    "api-tasks",
    "api-audit-events",
    "api-tokens",
    "api-approvals",
    "api-approval-policies",
    "api-reviewer-groups",
    "api-destinations",
]


def call(client: Any, method: str, path: str, body: Any) -> Any:
    if method == "get":
        return client.client.get(path)
    if method == "delete":
        return client.client.delete(path)
    return client.post(path, body)


def test_the_tables_cover_every_operation_of_the_api() -> None:
    names = {
        p.name
        for p in urlpatterns
        if isinstance(p, URLPattern)
        and p.name
        and p.name.startswith("api-")
        and p.name not in ("api-schema", "api-docs", "api-redoc")  # the docs pages
    }
    covered = {case[0] for case in TASK_CASES + OTHER_CASES} | set(LIST_CASES)
    assert covered == names
    assert get_resolver()  # the URLconf loads


@pytest.mark.parametrize("case", TASK_CASES + OTHER_CASES, ids=lambda case: case[0])
def test_alice_gets_404_for_every_globex_object_and_changes_nothing(
    api: Any, world: World, case: Case
) -> None:
    _, method, path, body = case
    before = snapshot("globex")
    problem(call(api("alice"), method, path(world, "globex"), body), 404)
    assert snapshot("globex") == before


def test_alice_lists_nothing_of_globex(api: Any, world: World) -> None:
    alice = api("alice")
    rows = ok(alice.get(f"{V1}/tasks"))["results"]
    assert rows and {row["tenant"] for row in rows} == {"acme"}
    assert ok(alice.get(f"{V1}/tasks", tenant="globex"))["results"] == []
    assert ok(alice.get(f"{V1}/tokens", tenant="globex"))["results"] == []
    problem(alice.get(f"{V1}/audit/events", tenant="globex"), 403)


@pytest.mark.parametrize("tenant", ["acme", "globex"])
@pytest.mark.parametrize("case", TASK_CASES[1:], ids=lambda case: case[0])
def test_carl_sees_tasks_of_both_tenants_but_acts_on_none(
    api: Any, world: World, case: Case, tenant: str
) -> None:
    _, method, path, body = case
    ok(api("carl").get(f"{V1}/tasks/{world.gate[tenant].pk}"))
    before = snapshot(tenant)
    problem(call(api("carl"), method, path(world, tenant), body), 403)
    assert snapshot(tenant) == before


def test_carl_reads_audit_and_exports_both_tenants(api: Any, world: World) -> None:
    carl = api("carl")
    chains = {row["chain"] for row in ok(carl.get(f"{V1}/audit/events"))["results"]}
    assert chains == {"tenant:acme", "tenant:globex"}
    for tenant in ("acme", "globex"):
        created = ok(carl.post(f"{V1}/audit/exports", {"tenant": tenant}), 201)
        assert carl.client.get(created["file"]).status_code == 200


@pytest.mark.parametrize("tenant", ["acme", "globex"])
@pytest.mark.parametrize("case", TASK_CASES, ids=lambda case: case[0])
def test_olga_acts_in_both_tenants(api: Any, world: World, case: Case, tenant: str) -> None:
    _, method, path, body = case
    detail = ok(call(api("olga"), method, path(world, tenant), body))
    assert detail["tenant"] == tenant
