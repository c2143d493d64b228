"""Authorization as a table: one actor × action × task case per line (STYLE rule 5)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from audit.models import AuditEvent
from audit.record import Actor
from mcptasks import access, lifecycle
from mcptasks.access import Action
from mcptasks.lifecycle import InputSpec
from mcptasks.models import Audience, InputRequest, Membership, Role, Task, TaskState, Tenant

pytestmark = pytest.mark.django_db

A = Action


@pytest.fixture
def tasks(make_task: Any) -> dict[str, Task]:
    """Two tasks of alice and one of adam (acme), one of bob (globex)."""
    return {
        "alice_task": make_task("alice"),
        "alice_other": make_task("alice"),
        "adam_task": make_task("adam"),
        "bob_task": make_task("bob"),
    }


# (actor, action, task, allowed)
CAN = [
    # the owner: view, answer, cancel her own task — nothing an operator does
    ("alice", A.VIEW, "alice_task", True),
    ("alice", A.ANSWER, "alice_task", True),
    ("alice", A.CANCEL, "alice_task", True),
    ("alice", A.FORCE_CANCEL, "alice_task", False),
    ("alice", A.RECONCILE, "alice_task", False),
    ("alice", A.GRANT, "alice_task", False),
    # another member of the same tenant sees nothing of hers
    ("adam", A.VIEW, "alice_task", False),
    ("adam", A.ANSWER, "alice_task", False),
    ("adam", A.CANCEL, "alice_task", False),
    ("alice", A.VIEW, "adam_task", False),
    # cross-tenant
    ("bob", A.VIEW, "alice_task", False),
    ("bob", A.CANCEL, "alice_task", False),
    ("bob", A.VIEW, "bob_task", True),
    ("alice", A.VIEW, "bob_task", False),
    # the acme admin: view and cancel in acme only
    ("amy", A.VIEW, "alice_task", True),
    ("amy", A.CANCEL, "adam_task", True),
    ("amy", A.ANSWER, "alice_task", False),
    ("amy", A.FORCE_CANCEL, "alice_task", False),
    ("amy", A.RECONCILE, "alice_task", False),
    ("amy", A.VIEW, "bob_task", False),
    ("amy", A.CANCEL, "bob_task", False),
    # the operator of acme and globex: everything, in both
    ("olga", A.VIEW, "alice_task", True),
    ("olga", A.ANSWER, "alice_task", True),
    ("olga", A.CANCEL, "alice_task", True),
    ("olga", A.FORCE_CANCEL, "alice_task", True),
    ("olga", A.RECONCILE, "adam_task", True),
    ("olga", A.GRANT, "alice_task", True),
    ("olga", A.VIEW, "bob_task", True),
    ("olga", A.FORCE_CANCEL, "bob_task", True),
    # the auditor: views both tenants, acts on none
    ("carl", A.VIEW, "alice_task", True),
    ("carl", A.VIEW, "bob_task", True),
    ("carl", A.CANCEL, "alice_task", False),
    ("carl", A.ANSWER, "alice_task", False),
    ("carl", A.FORCE_CANCEL, "bob_task", False),
    ("carl", A.RECONCILE, "alice_task", False),
    ("carl", A.GRANT, "bob_task", False),
]


@pytest.mark.parametrize(
    "actor, action, task, allowed", CAN, ids=[f"{u}-{a.value}-{t}" for u, a, t, _ in CAN]
)
def test_can(actor, action, task, allowed, users, tasks):
    decision = access.can(users[actor], action, tasks[task])
    assert bool(decision) is allowed
    if not allowed:
        assert decision.reason


def test_inactive_user_may_do_nothing(users, tasks):
    alice = users["alice"]
    alice.is_active = False
    alice.save(update_fields=["is_active"])
    assert not access.can(alice, A.VIEW, tasks["alice_task"])
    assert not access.visible_tasks(alice).exists()


# ---------------------------------------------------------------- visible_tasks
VISIBLE = {
    "alice": {"alice_task", "alice_other"},
    "adam": {"adam_task"},
    "amy": {"alice_task", "alice_other", "adam_task"},
    "bob": {"bob_task"},
    "olga": {"alice_task", "alice_other", "adam_task", "bob_task"},
    "carl": {"alice_task", "alice_other", "adam_task", "bob_task"},
}


@pytest.mark.parametrize("actor", sorted(VISIBLE))
def test_visible_tasks_is_one_query_returning_exactly_what_the_actor_may_see(
    actor, users, tasks, django_assert_num_queries
):
    names = {task.pk: name for name, task in tasks.items()}

    with django_assert_num_queries(1):
        visible = set(access.visible_tasks(users[actor]).values_list("pk", flat=True))

    assert {names[pk] for pk in visible} == VISIBLE[actor]


@pytest.fixture
def initech_task(cast: Any) -> Task:
    """A task in a third tenant where nobody of the cast holds a role."""
    tenant = Tenant.objects.create(slug="initech", name="Initech")
    ian = get_user_model().objects.create(username="ian")
    Membership.objects.create(user=ian, tenant=tenant, role=Role.MEMBER)
    task, _ = lifecycle.task_create(
        spec=lifecycle.NewTask(
            tenant_id=tenant.pk,
            principal_id=ian.pk,
            tool_name="echo_task",
            arguments={},
            policy_revision="test",
        ),
        actor=Actor.for_user(ian, kind="principal"),
    )
    return task


def test_visible_tasks_agrees_with_can_view_for_every_actor_and_task(users, tasks, initech_task):
    every_task = [*tasks.values(), initech_task]
    for name, user in users.items():
        visible = set(access.visible_tasks(user).values_list("pk", flat=True))
        allowed = {task.pk for task in every_task if access.can(user, A.VIEW, task)}
        assert visible == allowed, name


def test_tenant_roles_do_not_reach_a_tenant_without_membership(users, initech_task):
    for name in ("alice", "amy", "bob", "carl"):
        assert not access.can(users[name], A.VIEW, initech_task), name
        assert initech_task.pk not in set(
            access.visible_tasks(users[name]).values_list("pk", flat=True)
        ), name


def test_staff_operator_acts_only_in_tenants_where_they_hold_the_role(users, tasks, initech_task):
    """Issue 19: a staff user who is operator of acme and globex is nobody in initech."""
    olga = users["olga"]
    assert olga.is_staff
    for action in A:
        assert not access.can(olga, action, initech_task), action
    assert not access.visible_tasks(olga).filter(pk=initech_task.pk).exists()
    access.roles(olga)  # the listing's shape: planned on the roles read
    assert not access.visible_tasks(olga).filter(pk=initech_task.pk).exists()
    assert initech_task.tenant_id not in (access.tenants_where(olga, A.FORCE_CANCEL) or [])
    assert initech_task.tenant_id not in (access.token_admin_tenants(olga) or [])
    assert not access.may_see_tenant(olga, initech_task.tenant_id)
    assert access.can(olga, A.FORCE_CANCEL, tasks["bob_task"])  # where she holds the role


def test_removing_a_membership_ends_every_right_in_that_tenant(users, tasks):
    """The owner's rights, a role's and a delegation hold only while the user is a member."""
    alice, carl, adam = users["alice"], users["carl"], users["adam"]
    task = tasks["alice_task"]
    access.assign_delegation(grantee=adam, task=task, delegation="view")
    assert access.can(alice, A.VIEW, task) and access.can(carl, A.VIEW, task)
    assert access.can(adam, A.VIEW, task)
    Membership.objects.filter(tenant_id=task.tenant_id, user__in=[alice, carl, adam]).delete()
    for user in (alice, carl, adam):
        user = get_user_model().objects.get(pk=user.pk)  # a new request: roles read again
        assert not access.can(user, A.VIEW, task), user
        assert not access.can(user, A.CANCEL, task), user
        assert not access.visible_tasks(user).filter(pk=task.pk).exists(), user
        access.roles(user)  # the listing's shape: planned on the roles read
        assert not access.visible_tasks(user).filter(pk=task.pk).exists(), user
        access.refresh(user)
        assert access.get_visible_task(user, task.pk) is None


def test_unknown_and_forbidden_task_ids_look_the_same(users, tasks):
    bob = users["bob"]
    assert access.get_visible_task(bob, tasks["alice_task"].pk) is None
    assert access.get_visible_task(bob, "no-such-task") is None
    assert access.get_visible_task(bob, tasks["bob_task"].pk) == tasks["bob_task"]


# ---------------------------------------------------------------- delegations
def test_delegation_granted_then_revoked(users, tasks, actors):
    adam, olga = users["adam"], users["olga"]
    task, other = tasks["alice_task"], tasks["alice_other"]
    assert access.can(olga, A.GRANT, task)
    assert not access.can(adam, A.GRANT, task)

    for delegation in ("view", "answer"):
        lifecycle.task_grant_delegation(
            task_id=task.pk, actor=actors["olga"], grantee=adam, delegation=delegation
        )

    assert access.can(adam, A.VIEW, task)
    assert access.can(adam, A.ANSWER, task)
    assert not access.can(adam, A.CANCEL, task)
    assert not access.can(adam, A.VIEW, other)
    assert set(access.visible_tasks(adam).values_list("pk", flat=True)) == {
        task.pk,
        tasks["adam_task"].pk,
    }
    assert sorted(d for _, d in access.delegations_of(task)) == ["answer", "view"]

    for delegation in ("view", "answer"):
        lifecycle.task_grant_delegation(
            task_id=task.pk, actor=actors["olga"], grantee=adam, delegation=delegation, revoke=True
        )

    assert not access.can(adam, A.VIEW, task)
    assert not access.can(adam, A.ANSWER, task)
    assert set(access.visible_tasks(adam).values_list("pk", flat=True)) == {tasks["adam_task"].pk}
    assert access.delegations_of(task) == []
    events = list(
        AuditEvent.objects.filter(task_id=task.pk, action__startswith="delegation.")
        .order_by("id")
        .values_list("action", "actor_id", "data__grantee", "data__delegation")
    )
    olga_id = str(olga.pk)
    assert events == [
        ("delegation.granted", olga_id, "adam", "view"),
        ("delegation.granted", olga_id, "adam", "answer"),
        ("delegation.revoked", olga_id, "adam", "view"),
        ("delegation.revoked", olga_id, "adam", "answer"),
    ]


def test_answer_delegation_alone_lets_the_delegate_see_the_task(users, tasks, actors):
    adam, task = users["adam"], tasks["alice_task"]
    lifecycle.task_grant_delegation(
        task_id=task.pk, actor=actors["olga"], grantee=adam, delegation="answer"
    )
    assert access.can(adam, A.VIEW, task)
    assert access.visible_tasks(adam).filter(pk=task.pk).exists()


def test_unknown_delegation_is_refused(users, tasks, actors):
    with pytest.raises(ValueError):
        lifecycle.task_grant_delegation(
            task_id=tasks["alice_task"].pk,
            actor=actors["olga"],
            grantee=users["adam"],
            delegation="cancel",
        )
    assert not AuditEvent.objects.filter(action__startswith="delegation.").exists()


# ---------------------------------------------------------------- who may answer
@pytest.fixture
def asking_task(task_in: Any) -> Task:
    """An alice task waiting on one request of each audience, plus two approval gates that
    forbid self-approval."""
    return task_in(
        TaskState.AWAITING_INPUT,
        requests=[
            InputSpec(
                key="client", method="elicitation/create", params={}, audience=Audience.CLIENT
            ),
            InputSpec(
                key="operator", method="elicitation/create", params={}, audience=Audience.OPERATOR
            ),
            InputSpec(key="any", method="elicitation/create", params={}, audience=Audience.ANY),
            InputSpec(
                key="gate",
                method="elicitation/create",
                params={},
                audience=Audience.ANY,
                forbid_self_approval=True,
            ),
            InputSpec(
                key="operator_gate",
                method="elicitation/create",
                params={},
                audience=Audience.OPERATOR,
                forbid_self_approval=True,
            ),
        ],
    )


# (actor, request key, allowed)
MAY_ANSWER = [
    ("alice", "client", True),
    ("adam", "client", False),
    ("amy", "client", False),
    ("olga", "client", False),
    ("carl", "client", False),
    ("bob", "client", False),
    ("alice", "operator", False),
    ("adam", "operator", False),
    ("amy", "operator", False),
    ("olga", "operator", True),
    ("carl", "operator", False),
    ("alice", "any", True),
    ("olga", "any", True),
    ("adam", "any", False),
    ("amy", "any", False),
    ("carl", "any", False),
    ("bob", "any", False),
    # no self-approval: the requester may not pass her own gate, an operator may
    ("alice", "gate", False),
    ("olga", "gate", True),
    ("adam", "gate", False),
    ("alice", "operator_gate", False),
    ("olga", "operator_gate", True),
]


@pytest.mark.parametrize(
    "actor, key, allowed", MAY_ANSWER, ids=[f"{u}-{k}" for u, k, _ in MAY_ANSWER]
)
def test_may_answer(actor, key, allowed, users, asking_task):
    request = InputRequest.objects.get(task=asking_task, key=key)
    decision = access.may_answer(users[actor], request, asking_task)
    assert bool(decision) is allowed
    if not allowed:
        assert decision.reason


def test_self_approval_is_refused_even_to_an_operator_who_asked(task_in, users):
    # olga's own task: her operator role does not let her approve her own gate.
    task = task_in(
        TaskState.AWAITING_OPERATOR,
        owner="olga",
        requests=[
            InputSpec(
                key="gate",
                method="elicitation/create",
                params={},
                audience=Audience.OPERATOR,
                forbid_self_approval=True,
            )
        ],
    )
    request = InputRequest.objects.get(task=task, key="gate")
    assert not access.may_answer(users["olga"], request, task)
    assert access.may_answer(users["olga"], InputRequest(audience=Audience.OPERATOR), task)


def test_named_approver_may_answer_operator_requests_until_revoked(users, asking_task, actors):
    adam = users["adam"]
    requests = {r.key: r for r in InputRequest.objects.filter(task=asking_task)}
    lifecycle.task_grant_delegation(
        task_id=asking_task.pk, actor=actors["olga"], grantee=adam, delegation="answer"
    )

    assert access.may_answer(adam, requests["operator"], asking_task)
    assert access.may_answer(adam, requests["any"], asking_task)
    assert access.may_answer(adam, requests["gate"], asking_task)
    assert not access.may_answer(adam, requests["client"], asking_task)

    lifecycle.task_grant_delegation(
        task_id=asking_task.pk, actor=actors["olga"], grantee=adam, delegation="answer", revoke=True
    )

    assert not access.may_answer(adam, requests["operator"], asking_task)
    assert not access.may_answer(adam, requests["any"], asking_task)


def test_view_delegation_does_not_let_the_delegate_answer(users, asking_task, actors):
    adam = users["adam"]
    lifecycle.task_grant_delegation(
        task_id=asking_task.pk, actor=actors["olga"], grantee=adam, delegation="view"
    )
    request = InputRequest.objects.get(task=asking_task, key="operator")
    assert access.can(adam, A.VIEW, asking_task)
    assert not access.may_answer(adam, request, asking_task)


def test_answerable_requests_by_channel(users, asking_task):
    def keys(name: str, channel: str) -> list[str]:
        return [
            r.key for r in access.answerable_requests(users[name], asking_task, channel=channel)
        ]

    # The client sees only client / any requests on the wire, and not her own gate.
    assert keys("alice", "mcp") == ["client", "any"]
    assert keys("alice", "dashboard") == ["client", "any"]
    assert keys("olga", "dashboard") == ["operator", "any", "gate", "operator_gate"]
    assert keys("carl", "dashboard") == []
