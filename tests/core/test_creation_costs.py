"""What one task creation sends (issue 23): only what a fresh task needs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from audit.record import Actor
from mcptasks import events, lifecycle
from mcptasks.auth import AuthError, authenticate_bearer
from mcptasks.models import ApiToken, Membership, Task

pytestmark = pytest.mark.django_db


def test_creation_broadcasts_to_the_tenant_group_only(
    make_task: Callable[..., Task],
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    sent: list[tuple[str, int, int, bool]] = []
    monkeypatch.setattr(
        events,
        "broadcast",
        lambda task_id, tenant_id, version, *, task_group=True: sent.append(
            (task_id, tenant_id, version, task_group)
        ),
    )
    with django_capture_on_commit_callbacks(execute=True):
        task = make_task()
    assert sent == [(task.pk, task.tenant_id, task.version, False)]


class _Layer:
    def __init__(self) -> None:
        self.groups: list[str] = []

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.groups.append(group)


@pytest.mark.parametrize(
    ("task_group", "groups"), [(True, ["task.t1", "tenant.7"]), (False, ["tenant.7"])]
)
def test_a_broadcast_without_the_task_group_sends_to_the_tenant_group_only(
    monkeypatch: pytest.MonkeyPatch, task_group: bool, groups: list[str]
) -> None:
    layer = _Layer()
    monkeypatch.setattr(events, "get_channel_layer", lambda: layer)
    loop = asyncio.new_event_loop()
    monkeypatch.setattr(events, "_sender_loop", lambda: loop)
    try:
        events.broadcast("t1", 7, 1, task_group=task_group)
        loop.run_until_complete(asyncio.sleep(0.01))
    finally:
        loop.close()
    assert layer.groups == groups


def test_active_task_limits_are_counted_no_further_than_each_limit(
    make_task: Callable[..., Task], settings: Any
) -> None:
    settings.MCPTASKS_MAX_ACTIVE_TASKS_PER_PRINCIPAL = 2
    make_task()
    make_task()
    with CaptureQueriesContext(connection) as queries, pytest.raises(lifecycle.LimitExceeded):
        make_task()
    [count] = queries.captured_queries
    assert count["sql"].count("LIMIT 2") == 1  # the principal's count stops at its limit
    assert "LIMIT 1000" in count["sql"]  # the tenant's at its own


def test_creation_with_the_principals_tenant_does_not_read_it_again(
    cast: dict[str, dict[str, Any]],
) -> None:
    entry = cast["alice"]
    spec = lifecycle.NewTask(
        tenant_id=entry["tenant"].pk,
        principal_id=entry["user"].pk,
        tool_name="echo_task",
        arguments={},
        policy_revision="test",
        tenant=entry["tenant"],
    )
    with CaptureQueriesContext(connection) as queries:
        task, _ = lifecycle.task_create(spec=spec, actor=Actor.system("test"))
    assert task.tenant is entry["tenant"]
    assert not [q for q in queries.captured_queries if 'FROM "mcptasks_tenant"' in q["sql"]]


def test_a_bearer_token_is_authenticated_by_one_statement_with_its_membership(
    cast: dict[str, dict[str, Any]],
) -> None:
    entry = cast["alice"]
    ApiToken.objects.filter(user=entry["user"]).update(last_used_at=timezone.now())  # no touch
    with CaptureQueriesContext(connection) as queries:
        principal = authenticate_bearer(f"Bearer {entry['token']}")
    assert (principal.user.pk, principal.tenant.pk) == (entry["user"].pk, entry["tenant"].pk)
    assert len(queries.captured_queries) == 1


def test_a_token_whose_owner_left_its_tenant_is_refused(cast: dict[str, dict[str, Any]]) -> None:
    entry = cast["alice"]
    Membership.objects.filter(user=entry["user"], tenant=entry["tenant"]).delete()
    with pytest.raises(AuthError) as refused:
        authenticate_bearer(f"Bearer {entry['token']}")
    assert refused.value.status == 401
    assert "no longer a member" in refused.value.description
