"""`make run` shows a deploy_service task pausing for approval (issue 6): the demo seed, once
its tasks run, leaves alice's production deploy waiting for an operator."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from mcptasks import access, wire
from mcptasks.models import InputRequest, Task
from mcptasks.runner import run_task
from mcptasks.tools.fakes import fake_cloud

pytestmark = pytest.mark.django_db(transaction=True)


def test_seeded_deploy_pauses_for_an_operator_approval(run_jobs: Any) -> None:
    call_command("seed_demo", "--if-empty", stdout=StringIO())
    tasks = list(Task.objects.select_related("principal").order_by("created_at"))
    for task in tasks:
        run_task(task.pk)

    deploys = [t for t in tasks if t.tool_name == "deploy_service"]
    assert len(deploys) == 1
    deploy = Task.objects.select_related("principal", "tenant").get(pk=deploys[0].pk)
    assert (deploy.principal.username, deploy.arguments["environment"]) == ("alice", "production")
    assert deploy.state == "awaiting_operator"
    request = InputRequest.objects.get(task=deploy)
    assert (request.key, request.audience, request.state, request.forbid_self_approval) == (
        "approval",
        "operator",
        "pending",
        True,
    )
    assert "production" in request.params["message"]
    # Two approvals from acme's release managers (issue 21), never alice.
    policy = request.gate["policy"]
    assert (policy["required"], policy["groups"]) == (2, ["release-managers"])
    assert not access.may_decide(deploy.principal, request, deploy)
    for name in ("olga", "amy"):
        assert access.may_decide(get_user_model().objects.get(username=name), request, deploy)
    assert not access.may_decide(get_user_model().objects.get(username="carl"), request, deploy)
    # The build ran (once) before the gate; the rollout waits behind it.
    assert [c["kind"] for c in fake_cloud.calls() if c["key"].startswith(deploy.pk)] == ["build"]
    # Working on the wire, waiting for an operator; in olga's inbox, not in alice's.
    shown = wire.detailed_task(
        deploy, access.answerable_requests(deploy.principal, deploy, channel="mcp")
    )
    assert shown["status"] == "working" and "operator" in shown["statusMessage"].lower()
    olga = get_user_model().objects.get(username="olga")
    assert request in access.answerable_inputs(olga)
    assert request not in access.answerable_inputs(deploy.principal)
