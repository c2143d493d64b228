"""Fixtures of the core tests: drive a task into any state through lifecycle, and look at it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from audit.record import Actor
from mcptasks import lifecycle
from mcptasks.models import Audience, Effect, InputRequest, Task, TaskState
from tests.faults import harness

S = TaskState
WORKER = "test-worker"


@pytest.fixture
def actors(users: dict[str, Any]) -> dict[str, Actor]:
    """An Actor per cast member (dashboard users; operators act as ``operator``)."""
    return {
        name: Actor.for_user(user, kind="operator" if name == "olga" else "user")
        for name, user in users.items()
    }


@pytest.fixture
def task_in(make_task: Callable[..., Task], actors: dict[str, Actor]) -> Callable[..., Task]:
    """Create a task and bring it to ``state`` through the lifecycle verbs a worker would call.

    ``awaiting_input`` waits on one ``client`` request (key ``q``), ``awaiting_operator`` on one
    ``operator`` request (key ``approve``), ``needs_reconciliation`` on the unknown effect of
    step ``deploy``; pass ``requests`` to ask something else.
    """

    def make(
        state: str,
        owner: str = "alice",
        requests: list[lifecycle.InputSpec] | None = None,
        **options: Any,
    ) -> Task:
        task = make_task(owner=owner, **options)
        if state == S.QUEUED:
            return task
        task = lifecycle.task_claim(task_id=task.pk, worker=WORKER)
        attempt = task.attempt
        if state == S.RUNNING:
            pass
        elif state == S.SLEEPING:
            task = lifecycle.task_sleep(
                task_id=task.pk, attempt=attempt, wake_at=timezone.now() + timedelta(hours=1)
            )
        elif state in (S.AWAITING_INPUT, S.AWAITING_OPERATOR):
            if requests is None:
                audience = Audience.CLIENT if state == S.AWAITING_INPUT else Audience.OPERATOR
                key = "q" if state == S.AWAITING_INPUT else "approve"
                requests = [
                    lifecycle.InputSpec(
                        key=key,
                        method="elicitation/create",
                        params={"message": key},
                        audience=audience,
                    )
                ]
            task = lifecycle.task_request_input(task_id=task.pk, attempt=attempt, requests=requests)
        elif state == S.NEEDS_RECONCILIATION:
            lifecycle.task_effect_intended(
                task_id=task.pk,
                attempt=attempt,
                step="deploy",
                idempotency_key=f"{task.pk}:deploy",
                idempotent=False,
            )
            task = lifecycle.task_mark_effect_unknown(
                task_id=task.pk, attempt=attempt, step="deploy"
            )
        elif state == S.COMPLETED:
            task = lifecycle.task_complete(
                task_id=task.pk, attempt=attempt, result={"content": [], "isError": False}
            )
        elif state == S.FAILED:
            task = lifecycle.task_fail(
                task_id=task.pk,
                attempt=attempt,
                actor=Actor.system("worker"),
                error=lifecycle.error_object("boom"),
            )
        elif state == S.CANCELLED:
            task = lifecycle.task_force_cancel(task_id=task.pk, actor=actors["olga"], reason="test")
        else:
            raise ValueError(state)
        assert task.state == state
        return task

    return make


@pytest.fixture
def audit_actions() -> Callable[[str], list[str]]:
    """The audit actions recorded for a task id, oldest first."""

    def actions(task_id: str) -> list[str]:
        return list(
            AuditEvent.objects.filter(task_id=task_id)
            .order_by("id")
            .values_list("action", flat=True)
        )

    return actions


@pytest.fixture
def snapshot() -> Callable[[str], dict[str, Any]]:
    """Everything lifecycle may write about a task: the row, its input requests, its effects,
    and the number of audit events in the whole database."""

    def take(task_id: str) -> dict[str, Any]:
        return {
            "task": Task.objects.filter(pk=task_id).values().first(),
            "inputs": list(InputRequest.objects.filter(task_id=task_id).order_by("id").values()),
            "effects": list(Effect.objects.filter(task_id=task_id).order_by("id").values()),
            "audit_events": AuditEvent.objects.count(),
        }

    return take


@pytest.fixture
def expire_lease() -> Callable[[str], None]:
    """Simulate a worker that died: its lease ran out a minute ago."""

    def expire(task_id: str) -> None:
        Task.objects.filter(pk=task_id).update(
            lease_expires_at=timezone.now() - timedelta(minutes=1)
        )

    return expire


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[harness.PrivateRedis]:
    """A redis-server of this test's own on a free port, stopped (by pid) after."""
    server = harness.PrivateRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()
