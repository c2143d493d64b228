"""Arguments redacted by policy on the approval page (issue 21 point 4): the gate's policy —
the tool's declaration and the tenant's rule — names argument fields to mask; the page shows
the arguments expanded, those fields masked, secrets masked by the standard redactor, and the
summary fields (masked the same way)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from audit.record import Actor
from mcptasks import approval_policies, lifecycle
from mcptasks.lifecycle import InputSpec
from mcptasks.models import InputKind, InputRequest, Task
from mcptasks.tools.context import GATE_SCHEMA, ApprovalPolicy
from tests.api import conftest as api_fixtures
from tests.api.conftest import ok

pytestmark = pytest.mark.django_db(transaction=True)

api_tokens = api_fixtures.api_tokens
api = api_fixtures.api

MASK = "[REDACTED]"


def page_of(user: Any, task_id: str) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(reverse("dashboard:answer", args=[task_id, "approval"]))
    assert response.status_code == 200
    return response.content.decode()


@pytest.fixture
def gated(make_task: Callable[..., Any]) -> Task:
    """alice's task at a gate whose tool declares ``ticket`` masked; its arguments hold a
    secret the standard redactor masks (``api_token``)."""
    arguments = {
        "service": "billing",
        "ticket": "CHG-4711 customer Jane Roe",
        "api_token": "tok-very-secret-value",
    }
    task = make_task("alice", "echo_task", arguments=arguments)
    task = lifecycle.task_claim(task_id=task.pk, worker="test")
    policy = ApprovalPolicy(required=1, roles=("operator",), redact=("ticket",)).as_json()
    return lifecycle.task_request_input(
        task_id=task.pk,
        attempt=task.attempt,
        requests=[
            InputSpec(
                key="approval",
                method="elicitation/create",
                params={"mode": "form", "message": "Ship it?", "requestedSchema": GATE_SCHEMA},
                audience="operator",
                forbid_self_approval=True,
                kind=InputKind.APPROVAL,
                gate={"summary": {"service": "billing", "ticket": "CHG-4711"}, "policy": policy},
            )
        ],
        actor=Actor.system("test"),
    )


def test_the_approval_page_masks_fields_the_tools_policy_names_and_secrets(
    gated: Task, users: dict[str, Any], api: Any
) -> None:
    html = page_of(users["olga"], gated.pk)
    assert "<details open data-arguments>" in html  # expanded by default
    assert "masked by policy: ticket" in html
    assert "billing" in html and MASK in html
    assert "CHG-4711" not in html and "Jane Roe" not in html  # arguments and summary
    assert "tok-very-secret-value" not in html
    listed = ok(api("olga").get("/api/v1/approvals"))
    assert listed[0]["summary"] == {"service": "billing", "ticket": MASK}


def test_a_tenant_rule_adds_fields_to_mask_on_the_demo_deploy(
    start: Callable[..., str], cast: dict[str, Any], users: dict[str, Any]
) -> None:
    amy = cast["amy"]["user"]
    approval_policies.save_rule(
        tenant=cast["amy"]["tenant"],
        actor=Actor.for_user(amy),
        created_by=amy,
        tool_name="deploy_service",
        argument="environment",
        value="production",
        roles=["operator"],
        redact=["version"],
    )
    task_id = start()
    policy = InputRequest.objects.get(task_id=task_id, key="approval").gate["policy"]
    assert policy["redact"] == ["version"]
    html = page_of(users["olga"], task_id)
    assert "1.4.2" not in html and "billing" in html and "production" in html
    assert "masked by policy: version" in html
