"""The demo's deploy_service through an unknown rollout (issue 6): the worker dies in the
non-idempotent rollout, the task waits for olga, and her decision finishes it.

The death is simulated in this process: the rollout's downstream call raises a BaseException
(before or after the fake cloud applied it), which leaves exactly what a SIGKILL leaves — the
effect ``intended``, the task ``running`` under a lease nobody renews. The lease is then made to
run out and the reaper requeues the task. tests/effects/test_crash.py kills real processes.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from audit.record import Actor
from mcptasks import lifecycle, sweeps
from mcptasks.models import Effect, Task
from mcptasks.runner import run_task
from mcptasks.tools.fakes import FakeCloud, fake_cloud

pytestmark = pytest.mark.django_db(transaction=True)

DEPLOY = {"service": "billing", "version": "1.4.2", "environment": "production"}


class WorkerDied(BaseException):
    """Stands for the SIGKILL: nothing after it runs, no ``except Exception`` catches it."""


@pytest.fixture
def approved(
    run_jobs: Any, mcp_for: Callable[[str], Any], users: dict[str, Any]
) -> Callable[[], str]:
    """alice's production deploy, built and approved by olga, queued for its rollout."""

    def make() -> str:
        task_id: str = mcp_for("alice").tool("deploy_service", DEPLOY).result["taskId"]
        assert run_task(task_id) == "awaiting_operator"
        lifecycle.task_decide_approval(
            task_id=task_id,
            key="approval",
            reviewer=users["olga"],
            verdict="approve",
            comment="",
            via="dashboard",
            actor=Actor.for_user(users["olga"], kind="operator"),
        )
        return task_id

    return make


def die_in_rollout(task_id: str, monkeypatch: pytest.MonkeyPatch, *, after_the_call: bool) -> None:
    """Run the task until its worker dies in the rollout; the reaper requeues it."""
    real_rollout = FakeCloud.rollout

    def rollout(self: FakeCloud, *args: Any, **kwargs: Any) -> Any:
        if after_the_call:
            real_rollout(self, *args, **kwargs)
        raise WorkerDied()

    with monkeypatch.context() as patched:
        patched.setattr(FakeCloud, "rollout", rollout)
        with pytest.raises(WorkerDied):
            run_task(task_id)
    assert Effect.objects.get(task_id=task_id, step="rollout").state == "intended"
    Task.objects.filter(pk=task_id).update(lease_expires_at=timezone.now() - timedelta(minutes=1))
    assert sweeps.reap_leases() == 1
    assert run_task(task_id) == "needs_reconciliation"


def rollout_calls(task_id: str) -> int:
    return sum(1 for call in fake_cloud.calls("rollout") if call["key"].startswith(task_id))


def test_rollout_reconciled_as_applied_completes_with_olgas_reference(
    approved: Callable[[], str],
    monkeypatch: pytest.MonkeyPatch,
    users: dict[str, Any],
    mcp_for: Callable[[str], Any],
) -> None:
    task_id = approved()
    die_in_rollout(task_id, monkeypatch, after_the_call=True)
    wire = mcp_for("alice").call("tasks/get", {"taskId": task_id}).result
    assert wire["status"] == "working" and "operator" in wire["statusMessage"]

    reference = fake_cloud.applied()[f"{task_id}:rollout"]["rollout_id"]
    effect = Effect.objects.get(task_id=task_id, step="rollout")
    lifecycle.task_reconcile_effect(
        effect_id=effect.pk,
        decision="applied",
        note="the cloud console shows the rollout",
        external_ref=reference,
        actor=Actor.for_user(users["olga"], kind="operator"),
    )
    assert run_task(task_id) == "completed"
    content = Task.objects.get(pk=task_id).result["structuredContent"]
    assert (content["environment"], content["rollout"]) == ("production", reference)
    assert rollout_calls(task_id) == 1  # never sent twice


def test_rollout_reconciled_as_not_applied_runs_again_once(
    approved: Callable[[], str], monkeypatch: pytest.MonkeyPatch, users: dict[str, Any]
) -> None:
    task_id = approved()
    die_in_rollout(task_id, monkeypatch, after_the_call=False)
    assert rollout_calls(task_id) == 0
    effect = Effect.objects.get(task_id=task_id, step="rollout")
    lifecycle.task_reconcile_effect(
        effect_id=effect.pk,
        decision="not_applied",
        note="no rollout in the cloud console",
        actor=Actor.for_user(users["olga"], kind="operator"),
    )
    assert run_task(task_id) == "completed"
    content = Task.objects.get(pk=task_id).result["structuredContent"]
    assert content["rollout"] == fake_cloud.applied()[f"{task_id}:rollout"]["rollout_id"]
    assert rollout_calls(task_id) == 1
