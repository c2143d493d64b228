"""The approval policy digest is part of a task's policy revision binding (issue 21 point 1):
a task of a tool that declares approval gates binds, at creation, the digest of the tenant's
rules that apply to it (canonical JSON, SHA-256); changing a rule changes the digest of new
tasks, never of existing ones; a gate declared under changed rules audits the change; the
approval page shows the digests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from audit.record import Actor
from mcptasks import approval_policies
from mcptasks.canonical import digest
from mcptasks.models import InputRequest, Task
from mcptasks.runner import run_task
from mcptasks.tools.registry import registry

pytestmark = pytest.mark.django_db(transaction=True)

PRODUCTION = {"service": "billing", "version": "1.4.2", "environment": "production"}
STAGING = {**PRODUCTION, "environment": "staging"}


def tighten(cast: dict[str, Any], required: int) -> Any:
    amy = cast["amy"]["user"]
    return approval_policies.save_rule(
        tenant=cast["amy"]["tenant"],
        actor=Actor.for_user(amy),
        created_by=amy,
        tool_name="deploy_service",
        argument="environment",
        value="production",
        required=required,
        roles=["operator"],
    )


def bound(task_id: str) -> str:
    return approval_policies.bound_rules_digest(Task.objects.get(pk=task_id).policy_revision)


def test_changing_a_rule_changes_the_digest_of_new_tasks_but_not_of_existing_ones(
    start: Callable[..., str], cast: dict[str, Any], users: dict[str, Any]
) -> None:
    tool = registry.get("deploy_service")
    assert tool is not None
    tighten(cast, 2)
    first = start()
    revision = Task.objects.get(pk=first).policy_revision
    assert len(revision) == 64 and approval_policies.tool_revision_of(revision) == (
        tool.policy_revision
    )
    expected = approval_policies.rules_digest(
        tenant_id=cast["alice"]["tenant"].pk, tool_name="deploy_service", arguments=PRODUCTION
    )
    assert bound(first) == expected[:32]
    # The gate was declared under the rules the task bound: no binding change.
    gate = InputRequest.objects.get(task_id=first, key="approval")
    assert gate.gate["policy"]["binding"] == expected

    tighten(cast, 3)
    second = start()
    assert bound(second) != bound(first)
    assert bound(first) == expected[:32]  # the existing task keeps what it was created with

    page = Client()
    page.force_login(users["olga"])
    html = page.get(reverse("dashboard:answer", args=[first, "approval"])).content.decode()
    assert "data-policy-digest" in html and bound(first)[:16] in html
    assert "data-binding-changed" not in html


def test_a_staging_call_binds_the_digest_of_no_rules(
    mcp_for: Callable[[str], Any], cast: dict[str, Any]
) -> None:
    tighten(cast, 2)
    reply = mcp_for("alice").tool("deploy_service", STAGING)
    assert bound(reply.result["taskId"]) == digest([])[:32]


def test_a_tool_without_gates_binds_only_its_own_revision(
    mcp_for: Callable[[str], Any],
) -> None:
    tool = registry.get("run_pipeline")
    assert tool is not None and not approval_policies.declares_gates(tool.fn)
    reply = mcp_for("alice").tool("run_pipeline", {"pipeline": "ci", "stages": 1})
    task = Task.objects.get(pk=reply.result["taskId"])
    assert task.policy_revision == tool.policy_revision


def test_a_gate_declared_under_changed_rules_audits_the_change(
    mcp_for: Callable[[str], Any], cast: dict[str, Any], users: dict[str, Any], audit_of: Any
) -> None:
    tighten(cast, 2)
    task_id = mcp_for("alice").tool("deploy_service", PRODUCTION).result["taskId"]
    created_under = bound(task_id)
    tighten(cast, 3)  # after creation, before the gate is declared
    assert run_task(task_id) == "awaiting_operator"
    assert bound(task_id) == created_under  # the binding itself never changes
    policy = InputRequest.objects.get(task_id=task_id, key="approval").gate["policy"]
    assert policy["required"] == 3  # the tightening covers queued work
    changes = [data["changes"] for _, _, data in audit_of(task_id, "task.binding_changed")]
    assert changes == [{"approval_policy": [created_under, policy["binding"][:32]]}]
    page = Client()
    page.force_login(users["olga"])
    html = page.get(reverse("dashboard:answer", args=[task_id, "approval"])).content.decode()
    assert "data-binding-changed" in html
