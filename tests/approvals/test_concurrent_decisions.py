"""Concurrent decisions on one gate, on PostgreSQL (issue 21): 20 reviewers decide at once on a
two-approval gate; the task's row lock serializes them, so exactly the first two approvals open
it (or the first reject closes it), every later decision is refused, none is lost or doubled."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from audit.record import Actor
from mcptasks import lifecycle
from mcptasks.models import ApprovalDecision, InputRequest, Membership, ReviewerGroup, Role

pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


def concurrent_decisions(task_id: str, deciders: list[tuple[Any, str]]) -> list[str]:
    """Each (reviewer, verdict) decides in its own thread and connection, all released at
    once; returns what each got: "ok" or the refusal's class name."""
    outcomes: list[str] = []
    barrier = threading.Barrier(len(deciders))

    def decide(user: Any, verdict: str) -> None:
        barrier.wait()
        try:
            lifecycle.task_decide_approval(
                task_id=task_id,
                key="approval",
                reviewer=user,
                verdict=verdict,
                comment="no" if verdict == "reject" else "",
                actor=Actor.for_user(user, kind="operator"),
                via="api",
            )
            outcomes.append("ok")
        except lifecycle.LifecycleError as exc:
            outcomes.append(type(exc).__name__)
        finally:
            connection.close()

    threads = [threading.Thread(target=decide, args=pair) for pair in deciders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


@pytest.fixture
def two_of_group(
    start: Callable[..., str], cast: dict[str, Any], django_user_model: Any
) -> tuple[str, list[Any]]:
    """alice's deploy with a gate needing 2 approvals of a 20-strong reviewer group."""
    tenant = cast["alice"]["tenant"]
    group = ReviewerGroup.objects.create(tenant=tenant, name="reviewers")
    reviewers = []
    for number in range(20):
        user = django_user_model.objects.create_user(username=f"rev{number}", password="x")
        Membership.objects.create(user=user, tenant=tenant, role=Role.MEMBER)
        group.members.add(user)
        reviewers.append(user)
    task_id = start()
    gate = InputRequest.objects.get(task_id=task_id, key="approval")
    gate.gate["policy"].update(required=2, roles=[], groups=["reviewers"])
    gate.save(update_fields=["gate"])
    return task_id, reviewers


def test_twenty_concurrent_approvals_record_exactly_the_first_two(
    two_of_group: tuple[str, list[Any]],
) -> None:
    task_id, reviewers = two_of_group
    outcomes = concurrent_decisions(task_id, [(user, "approve") for user in reviewers])
    assert sorted(outcomes) == ["InputNotPending"] * 18 + ["ok", "ok"]
    gate = InputRequest.objects.get(task_id=task_id, key="approval")
    assert (gate.state, gate.outcome) == ("answered", "approved")
    recorded = list(ApprovalDecision.objects.filter(request=gate).values_list("verdict", flat=True))
    assert recorded == ["approve", "approve"]
    assert [d["verdict"] for d in gate.response["content"]["decisions"]] == recorded


def test_concurrent_approvals_and_rejects_close_at_the_first_reject_or_the_second_approval(
    two_of_group: tuple[str, list[Any]],
) -> None:
    task_id, reviewers = two_of_group
    deciders = [(user, "reject" if n % 4 == 0 else "approve") for n, user in enumerate(reviewers)]
    outcomes = concurrent_decisions(task_id, deciders)
    gate = InputRequest.objects.get(task_id=task_id, key="approval")
    recorded = list(
        ApprovalDecision.objects.filter(request=gate)
        .order_by("created_at", "id")
        .values_list("verdict", flat=True)
    )
    assert outcomes.count("ok") == len(recorded)  # none lost, none doubled
    assert outcomes.count("InputNotPending") == 20 - len(recorded)
    # The gate closed at the decision that settled it, and nothing was recorded after.
    if recorded[-1] == "reject":
        assert gate.outcome == "rejected" and recorded.count("approve") <= 1
    else:
        assert gate.outcome == "approved" and recorded == ["approve", "approve"]


def test_one_reviewer_deciding_twice_at_once_is_recorded_once(
    two_of_group: tuple[str, list[Any]],
) -> None:
    task_id, reviewers = two_of_group
    outcomes = concurrent_decisions(task_id, [(reviewers[0], "approve")] * 10)
    assert sorted(outcomes) == ["DecisionRefused"] * 9 + ["ok"]
    assert ApprovalDecision.objects.filter(task_id=task_id).count() == 1
