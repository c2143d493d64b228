"""Who may answer which input request outside MCP, as a set (``access.answerable_inputs``: the
inbox and every dashboard page's count): for a member who answers by delegation or as the task's
principal and for an operator, read from the input requests alone — the people behind a task are
recorded on its requests (migration 0019) — and the same as the one-request check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from audit.record import Actor
from mcptasks import access, lifecycle
from mcptasks.lifecycle import InputSpec
from mcptasks.models import Audience, InputKind, InputRequest, Role, Task, TaskState
from mcptasks.tokens import issue_token

pytestmark = pytest.mark.django_db


def ask(key: str, audience: str, *, gate: bool = False) -> InputSpec:
    return InputSpec(
        key=key,
        method="elicitation/create",
        params={},
        audience=audience,
        forbid_self_approval=gate,
    )


# Operators decide, and so does a named approver (an answer delegation).
POLICY = {"roles": [Role.OPERATOR], "named_approvers": True}
ASKS = [
    ask("client", Audience.CLIENT),
    ask("operator", Audience.OPERATOR),
    ask("any", Audience.ANY),
    ask("any_gate", Audience.ANY, gate=True),
    ask("operator_gate", Audience.OPERATOR, gate=True),
    InputSpec(  # an approval gate (ctx.approve): decided under its policy, never by a requester
        key="approval",
        method="elicitation/create",
        params={},
        audience=Audience.OPERATOR,
        forbid_self_approval=True,
        kind=InputKind.APPROVAL,
        gate={"summary": {}, "policy": POLICY},
    ),
]


@pytest.fixture
def scene(
    task_in: Callable[..., Task], users: dict[str, Any], actors: dict[str, Actor], cast: Any
) -> dict[str, Task]:
    """adam (an acme member) waited on by: his own task; alice's task delegated to him for
    answering; alice's task created with a token adam issued to her, also delegated to him;
    alice's task not delegated; bob's task (globex) delegated to him."""
    adam = users["adam"]
    token, _ = issue_token(
        user=users["alice"], tenant=cast["alice"]["tenant"], actor=actors["adam"], issued_by=adam
    )
    tasks = {
        "own": task_in(TaskState.AWAITING_INPUT, owner="adam", requests=ASKS),
        "delegated": task_in(TaskState.AWAITING_INPUT, owner="alice", requests=ASKS),
        "by_proxy": task_in(
            TaskState.AWAITING_INPUT, owner="alice", requests=ASKS, token_id=token.pk
        ),
        "alices": task_in(TaskState.AWAITING_INPUT, owner="alice", requests=ASKS),
        "other_tenant": task_in(TaskState.AWAITING_INPUT, owner="bob", requests=ASKS),
    }
    for name in ("delegated", "by_proxy", "other_tenant"):
        lifecycle.task_grant_delegation(
            task_id=tasks[name].pk, actor=actors["olga"], grantee=adam, delegation="answer"
        )
    return tasks


# What adam may answer outside MCP: operator and any requests of the tasks delegated to him in
# his tenant, and the approval gate there as its named approver (not the gates of the one whose
# token he issued), the any request of his own task (not its gates): never a client request,
# alice's undelegated task or another tenant's.
EXPECTED = {
    ("own", "any"),
    ("delegated", "operator"),
    ("delegated", "any"),
    ("delegated", "any_gate"),
    ("delegated", "operator_gate"),
    ("delegated", "approval"),
    ("by_proxy", "operator"),
    ("by_proxy", "any"),
}


def test_a_member_answers_delegated_requests_and_the_any_requests_of_their_own_tasks(
    scene: dict[str, Task], users: dict[str, Any]
) -> None:
    names = {task.pk: name for name, task in scene.items()}

    listed = {(names[r.task_id], r.key) for r in access.answerable_inputs(users["adam"])}

    assert listed == EXPECTED
    for name, key in listed:  # the one-request check agrees with the set form
        request = scene[name].input_requests.get(key=key)
        assert access.may_answer(users["adam"], request, scene[name])


def test_an_operator_answers_every_request_but_the_gates_of_tasks_behind_which_they_are(
    scene: dict[str, Task],
    task_in: Callable[..., Task],
    users: dict[str, Any],
    actors: dict[str, Actor],
    cast: Any,
) -> None:
    olga = users["olga"]
    token, _ = issue_token(
        user=users["adam"], tenant=cast["adam"]["tenant"], actor=actors["olga"], issued_by=olga
    )
    mine = {
        "olgas": task_in(TaskState.AWAITING_INPUT, owner="olga", requests=ASKS),
        "issued_by_olga": task_in(
            TaskState.AWAITING_INPUT, owner="adam", requests=ASKS, token_id=token.pk
        ),
    }
    names = {task.pk: name for name, task in {**scene, **mine}.items()}

    listed = {(names[r.task_id], r.key) for r in access.answerable_inputs(olga)}

    every = {"operator", "any", "any_gate", "operator_gate", "approval"}
    assert listed == {
        *((name, key) for name in scene for key in every),
        *((name, key) for name in mine for key in ("operator", "any")),
    }
    for name, key in {(n, k) for n in {**scene, **mine} for k in every} - listed:
        task = {**scene, **mine}[name]
        assert not access.may_answer(olga, task.input_requests.get(key=key), task)


@pytest.mark.parametrize("who", ["adam", "alice", "amy", "bob", "olga", "carl", "nobody"])
def test_the_answerable_set_is_what_the_one_request_check_allows(
    who: str, scene: dict[str, Task], users: dict[str, Any], django_user_model: Any
) -> None:
    user = django_user_model.objects.create_user("nobody") if who == "nobody" else users[who]
    outside_mcp = InputRequest.objects.filter(state="pending").exclude(audience=Audience.CLIENT)
    allowed = {
        r.pk for r in outside_mcp.select_related("task") if access.may_answer(user, r, r.task)
    }

    assert {r.pk for r in access.answerable_inputs(user)} == allowed


@pytest.mark.parametrize("user", ["adam", "olga", "alice", "carl"])
def test_the_answerable_requests_are_read_without_the_task_table(
    user: str, scene: dict[str, Task], users: dict[str, Any]
) -> None:
    pending = access.answerable_inputs_before_gates(users[user])

    assert '"mcptasks_task"' not in str(pending.query)


def test_a_member_with_nothing_to_answer_gets_an_empty_inbox(
    task_in: Callable[..., Task], users: dict[str, Any]
) -> None:
    task_in(TaskState.AWAITING_INPUT, owner="alice", requests=ASKS)

    assert list(access.answerable_inputs(users["adam"])) == []


def test_a_request_records_the_people_behind_its_task(scene: dict[str, Task], users: Any) -> None:
    recorded = {
        name: set(task.input_requests.values_list("principal_id", "token_issuer_id"))
        for name, task in scene.items()
    }

    alice, adam, bob = users["alice"].pk, users["adam"].pk, users["bob"].pk
    assert recorded == {
        "own": {(adam, None)},
        "delegated": {(alice, None)},
        "by_proxy": {(alice, adam)},
        "alices": {(alice, None)},
        "other_tenant": {(bob, None)},
    }


def test_deleting_the_creating_token_does_not_make_its_issuer_eligible(
    scene: dict[str, Task], users: dict[str, Any]
) -> None:
    adam, task = users["adam"], scene["by_proxy"]
    token = task.token
    assert token is not None
    token.delete()
    task.refresh_from_db()
    assert task.token_id is None

    listed = {r.key for r in access.answerable_inputs(adam) if r.task_id == task.pk}
    refused = [
        access.may_answer(adam, task.input_requests.get(key=key), task)
        for key in ("any_gate", "operator_gate", "approval")
    ]
    decided = access.may_decide(adam, task.input_requests.get(key="approval"), task)

    assert listed == {"operator", "any"}
    assert [(bool(d), d.reason) for d in [*refused, decided]] == [
        (False, "the requester may not approve their own request")
    ] * 4


@pytest.mark.pg
def test_a_request_inserted_without_its_requesters_gets_them_from_its_task(
    scene: dict[str, Task], users: dict[str, Any]
) -> None:
    """Migrations run while the previous release still serves: its workers insert requests
    without ``principal`` and ``token_issuer``, and PostgreSQL fills them from the task
    (migration 0019's trigger) instead of refusing the row."""
    from django.db import connection

    task = scene["by_proxy"]
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO mcptasks_inputrequest (task_id, tenant_id, key, method, params, "
            "audience, forbid_self_approval, state, answered_via, created_at, kind, gate, "
            "outcome) VALUES (%s, %s, 'old_release', 'elicitation/create', '{}', 'any', true, "
            "'pending', '', now(), 'form', '{}', '')",
            [task.pk, task.tenant_id],
        )

    request = task.input_requests.get(key="old_release")
    assert (request.principal_id, request.token_issuer_id) == (
        users["alice"].pk,
        users["adam"].pk,
    )
    assert request not in access.answerable_inputs(users["adam"])
