"""Fixtures of the dashboard tests: signed-in clients for the cast, and tasks brought into the
states the dashboard acts on, through the lifecycle verbs a worker would call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from mcptasks import lifecycle
from mcptasks.models import Audience, Task

WORKER = "test-worker"

APPROVAL_SCHEMA = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve the rollout"},
        "comment": {"type": "string", "title": "Comment"},
    },
    "required": ["approve"],
}


@pytest.fixture(autouse=True)
def plain_http(settings: Any) -> None:
    """These requests come over plain HTTP: with DATABASE_URL set the settings are the
    production ones, whose HTTPS redirect would answer every request with a 301."""
    settings.SECURE_SSL_REDIRECT = False


@pytest.fixture
def client_for(users: dict[str, Any]) -> Callable[[str], Client]:
    """``client_for("olga")`` → a test client signed in as olga (one per name)."""
    clients: dict[str, Client] = {}

    def get(name: str) -> Client:
        if name not in clients:
            client = Client()
            client.force_login(users[name])
            clients[name] = client
        return clients[name]

    return get


@pytest.fixture
def awaiting(make_task: Callable[..., Task]) -> Callable[..., Task]:
    """A task of ``owner`` waiting on one input request (by default an operator approval that
    forbids self-approval, key ``approval``)."""

    def make(
        owner: str = "alice",
        *,
        key: str = "approval",
        audience: str = Audience.OPERATOR,
        schema: dict[str, Any] | None = None,
        message: str = "Approve the rollout?",
        forbid_self_approval: bool = True,
        tool_name: str = "echo_task",
    ) -> Task:
        task = make_task(owner=owner, tool_name=tool_name)
        task = lifecycle.task_claim(task_id=task.pk, worker=WORKER)
        params = {"mode": "form", "message": message, "requestedSchema": schema or APPROVAL_SCHEMA}
        return lifecycle.task_request_input(
            task_id=task.pk,
            attempt=task.attempt,
            requests=[
                lifecycle.InputSpec(
                    key=key,
                    method="elicitation/create",
                    params=params,
                    audience=audience,
                    forbid_self_approval=forbid_self_approval,
                )
            ],
        )

    return make


@pytest.fixture
def unknown_effect(make_task: Callable[..., Task]) -> Callable[..., Task]:
    """A task of ``owner`` in needs_reconciliation: its step ``rollout`` started and was never
    confirmed (a crash), so its outcome is unknown."""

    def make(owner: str = "alice", step: str = "rollout") -> Task:
        task = make_task(owner=owner)
        task = lifecycle.task_claim(task_id=task.pk, worker=WORKER)
        lifecycle.task_effect_intended(
            task_id=task.pk,
            attempt=task.attempt,
            step=step,
            idempotency_key=f"{task.pk}:{step}",
            idempotent=False,
        )
        return lifecycle.task_mark_effect_unknown(task_id=task.pk, attempt=task.attempt, step=step)

    return make


@pytest.fixture
def running(make_task: Callable[..., Task]) -> Callable[..., Task]:
    def make(owner: str = "alice", **options: Any) -> Task:
        task = make_task(owner=owner, **options)
        return lifecycle.task_claim(task_id=task.pk, worker=WORKER)

    return make
