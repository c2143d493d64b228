"""Tasks through the REST API: the list, the detail, and each action (one lifecycle verb)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from mcptasks import lifecycle
from mcptasks.lifecycle import InputSpec
from mcptasks.models import InputRequest, Task, TaskState
from mcptasks.wire import detailed_for
from tests.api.conftest import all_pages, ok, problem
from tests.protocol.conftest import validate

pytestmark = pytest.mark.django_db
S = TaskState
TASKS = "/api/v1/tasks"


def ids(page: dict[str, Any]) -> set[str]:
    return {row["id"] for row in page["results"]}


def answer_path(task_id: str, key: str) -> str:
    return f"{TASKS}/{task_id}/input-requests/{key}/answer"


# The demo deploy's approval is a gate: its answer is a reviewer's decision.
APPROVE = {"response": {"action": "accept", "content": {"decision": "approve"}}}


# ---------------------------------------------------------------- list
def test_list_shows_each_member_only_what_they_may_see(api: Any, make_task: Any) -> None:
    alice, adam, bob = make_task("alice"), make_task("adam"), make_task("bob")
    everyone = {alice.pk, adam.pk, bob.pk}
    assert ids(ok(api("alice").get(TASKS))) == {alice.pk}
    assert ids(ok(api("adam").get(TASKS))) == {adam.pk}
    assert ids(ok(api("bob").get(TASKS))) == {bob.pk}
    assert ids(ok(api("amy").get(TASKS))) == {alice.pk, adam.pk}
    assert ids(ok(api("carl").get(TASKS))) == everyone
    assert ids(ok(api("olga").get(TASKS))) == everyone


def test_list_rows_carry_state_wire_status_and_binding(api: Any, task_in: Any) -> None:
    task = task_in(S.AWAITING_OPERATOR)
    (row,) = ok(api("alice").get(TASKS))["results"]
    assert row["id"] == task.pk and row["tenant"] == "acme" and row["principal"] == "alice"
    assert row["tool"] == "echo_task"
    assert row["state"] == "awaiting_operator" and row["status"] == "working"
    assert row["version"] == task.version


def test_list_filters_by_state_status_tool_principal_and_job(
    api: Any, task_in: Any, make_task: Any
) -> None:
    waiting = task_in(S.AWAITING_INPUT)
    done = task_in(S.COMPLETED, owner="adam")
    other_tool = make_task("alice", tool_name="ask_twice")
    Task.objects.filter(pk=done.pk).update(backend_job_id="job-42")
    olga = api("olga")
    assert ids(ok(olga.get(TASKS, state="awaiting_input"))) == {waiting.pk}
    assert ids(ok(olga.get(TASKS, state=["completed", "awaiting_input"]))) == {waiting.pk, done.pk}
    assert ids(ok(olga.get(TASKS, status="input_required"))) == {waiting.pk}
    assert ids(ok(olga.get(TASKS, status="working"))) == {other_tool.pk}
    assert ids(ok(olga.get(TASKS, tool="ask_twice"))) == {other_tool.pk}
    assert ids(ok(olga.get(TASKS, principal="adam"))) == {done.pk}
    assert ids(ok(olga.get(TASKS, backend_job_id="job-42"))) == {done.pk}
    assert ids(ok(olga.get(TASKS, tenant="globex"))) == set()


def test_list_filters_by_created_and_updated_ranges(api: Any, make_task: Any) -> None:
    now = timezone.now()
    old, new = make_task("alice"), make_task("alice")
    Task.objects.filter(pk=old.pk).update(
        created_at=now - timedelta(days=3), updated_at=now - timedelta(days=2)
    )
    alice = api("alice")
    since = (now - timedelta(days=1)).isoformat()
    assert ids(ok(alice.get(TASKS, created_after=since))) == {new.pk}
    assert ids(ok(alice.get(TASKS, created_before=since))) == {old.pk}
    assert ids(ok(alice.get(TASKS, updated_after=since))) == {new.pk}
    assert ids(ok(alice.get(TASKS, updated_before=since))) == {old.pk}


def test_list_pages_with_a_stable_cursor_newest_first(api: Any, make_task: Any) -> None:
    made = [make_task("alice") for _ in range(5)]
    # Two tasks created at the same instant: the id breaks the tie, so none is lost or repeated.
    Task.objects.filter(pk__in=[made[1].pk, made[2].pk]).update(created_at=made[1].created_at)
    seen = [row["id"] for row in all_pages(api("alice"), TASKS, page_size=2)]
    assert sorted(seen) == sorted(task.pk for task in made) and len(seen) == 5
    created = [Task.objects.get(pk=task_id).created_at for task_id in seen]
    assert created == sorted(created, reverse=True)


def test_list_pages_back_with_the_previous_link_to_the_same_rows(api: Any, make_task: Any) -> None:
    made = [make_task("alice") for _ in range(5)]
    Task.objects.filter(pk__in=[made[2].pk, made[3].pk]).update(created_at=made[2].created_at)
    alice = api("alice")
    first = ok(alice.get(TASKS, page_size=2))
    second = ok(alice.client.get(first["next"]))
    third = ok(alice.client.get(second["next"]))
    assert first["previous"] is None and third["next"] is None and len(third["results"]) == 1
    back = ok(alice.client.get(third["previous"]))
    assert [row["id"] for row in back["results"]] == [row["id"] for row in second["results"]]
    start = ok(alice.client.get(back["previous"]))
    assert [row["id"] for row in start["results"]] == [row["id"] for row in first["results"]]
    assert start["previous"] is None


def test_the_rest_lists_and_the_dashboard_share_one_cursor_format(api: Any, make_task: Any) -> None:
    from urllib.parse import parse_qs, urlsplit

    from mcptasks.pagination import decode_cursor

    for _ in range(3):
        make_task("alice")
    first = ok(api("alice").get(TASKS, page_size=2))
    cursor = parse_qs(urlsplit(first["next"]).query)["cursor"][0]
    parts = decode_cursor(cursor)
    last = Task.objects.get(pk=first["results"][-1]["id"])
    assert parts == ["n", last.created_at.isoformat(), last.pk]


@pytest.mark.parametrize(
    "params, field",
    [
        ({"state": "bogus"}, "state"),
        ({"status": "done"}, "status"),
        ({"created_after": "yesterday"}, "created_after"),
        ({"cursor": "not-a-cursor"}, "cursor"),
    ],
)
def test_list_refuses_invalid_filters_with_422(
    api: Any, params: dict[str, str], field: str
) -> None:
    body = problem(api("alice").get(TASKS, **params), 422)
    assert field in body["errors"] and body["detail"].lower().startswith(field)


# ---------------------------------------------------------------- detail
def test_detail_shows_binding_inputs_effects_timeline_and_the_wire_task(
    api: Any, paused_deploy: Any, users: dict[str, Any]
) -> None:
    task = paused_deploy("alice")
    for viewer in ("alice", "olga", "carl", "amy"):
        detail = ok(api(viewer).get(f"{TASKS}/{task.pk}"))
        assert detail["id"] == task.pk and detail["tool"] == "deploy_service"
        for field in ("argument_digest", "server_build", "policy_revision"):
            assert detail[field] == getattr(task, field)
        assert detail["arguments"]["service"] == "billing"
        (request,) = detail["input_requests"]
        assert request["key"] == "approval" and request["audience"] == "operator"
        assert request["forbid_self_approval"] is True and request["state"] == "pending"
        assert request["can_answer"] is (viewer == "olga")
        assert [e["step"] for e in detail["effects"]] == ["build"]
        assert detail["effects"][0]["state"] == "applied"
        actions = [event["action"] for event in detail["timeline"]]
        assert actions[0] == "task.created" and actions[-1] == "task.input_requested"
        # `task` is what this viewer's tasks/get returns, and valid MCP.
        task.refresh_from_db()
        assert detail["task"] == detailed_for(users[viewer], task)
        validate("GetTaskResult", {"resultType": "complete", **detail["task"]}, ext=True)


def test_detail_redacts_arguments_by_name_value_and_the_tools_own_list(
    api: Any, make_task: Any, api_pack: str
) -> None:
    task = make_task(
        "alice",
        tool_name="api_sensitive_args",
        arguments={
            "service": "billing",
            "launch_code": "0000-1111",
            "password": "hunter2",
            "note": "Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123456789",
        },
    )
    arguments = ok(api("alice").get(f"{TASKS}/{task.pk}"))["arguments"]
    assert arguments["service"] == "billing"
    assert arguments["launch_code"] == "[REDACTED]"
    assert arguments["password"] == "[REDACTED]"
    assert "abcdefghijklmnopqrstuvwxyz" not in arguments["note"]


def test_detail_of_unknown_or_invisible_task_is_404(api: Any, make_task: Any) -> None:
    bob = make_task("bob")
    problem(api("alice").get(f"{TASKS}/{bob.pk}"), 404)
    problem(api("alice").get(f"{TASKS}/no-such-task"), 404)
    problem(api("adam").get(f"{TASKS}/{make_task('alice').pk}"), 404)


# ---------------------------------------------------------------- answer
def test_requester_cannot_approve_own_deploy_but_an_operator_can(
    api: Any, paused_deploy: Any
) -> None:
    task = paused_deploy("alice")
    body = problem(api("alice").post(answer_path(task.pk, "approval"), APPROVE), 403)
    assert "own request" in body["detail"]
    assert InputRequest.objects.get(task=task, key="approval").state == "pending"

    detail = ok(api("olga").post(answer_path(task.pk, "approval"), APPROVE))
    assert detail["state"] == "queued"
    (request,) = detail["input_requests"]
    assert request["state"] == "answered" and request["answered_by"] == "olga"
    assert request["answered_via"] == "api"
    assert request["response"]["content"]["outcome"] == "approved"
    assert [d["reviewer"] for d in request["response"]["content"]["decisions"]] == ["olga"]
    event = AuditEvent.objects.get(task_id=task.pk, action="approval.approved")
    assert event.actor_display == "olga" and event.actor_kind == "operator"
    assert event.data["via"] == "api"


def test_answer_is_validated_against_the_request_schema(api: Any, paused_deploy: Any) -> None:
    task = paused_deploy("alice")
    wrong = {"response": {"action": "accept", "content": {"decision": "yes"}}}
    body = problem(api("olga").post(answer_path(task.pk, "approval"), wrong), 422)
    assert "decision" in body["detail"] and "'approve'" in body["detail"]
    problem(api("olga").post(answer_path(task.pk, "approval"), {"response": {"action": "ok"}}), 422)
    problem(api("olga").post(answer_path(task.pk, "approval"), {}), 422)
    assert InputRequest.objects.get(task=task, key="approval").state == "pending"


def test_secret_answers_are_redacted_in_the_task_detail(api: Any, task_in: Any) -> None:
    schema = {
        "type": "object",
        "properties": {"pin": {"type": "string", "format": "password"}, "ok": {"type": "boolean"}},
    }
    task = task_in(
        "awaiting_operator",
        requests=[
            InputSpec(
                key="unlock",
                method="elicitation/create",
                audience="operator",
                params={"message": "PIN?", "requestedSchema": schema},
            )
        ],
    )
    answer = {"response": {"action": "accept", "content": {"pin": "pin-s3cret-kx7q", "ok": True}}}
    detail = ok(api("olga").post(f"/api/v1/tasks/{task.pk}/input-requests/unlock/answer", answer))
    (request,) = detail["input_requests"]
    assert request["response"]["content"] == {"pin": "[REDACTED]", "ok": True}
    assert "pin-s3cret-kx7q" not in json.dumps(detail)


def test_second_answer_is_a_conflict(api: Any, paused_deploy: Any) -> None:
    task = paused_deploy("alice")
    ok(api("olga").post(answer_path(task.pk, "approval"), APPROVE))
    body = problem(api("olga").post(answer_path(task.pk, "approval"), APPROVE), 409)
    assert "approval" in body["detail"]


def test_answer_of_unknown_key_is_404(api: Any, paused_deploy: Any) -> None:
    task = paused_deploy("alice")
    problem(api("olga").post(answer_path(task.pk, "nope"), APPROVE), 404)


def test_auditor_sees_but_cannot_answer(api: Any, paused_deploy: Any) -> None:
    task = paused_deploy("alice")
    problem(api("carl").post(answer_path(task.pk, "approval"), APPROVE), 403)


def test_client_question_is_answered_by_its_owner(api: Any, task_in: Any) -> None:
    task = task_in(S.AWAITING_INPUT)  # one `client` request, key q
    problem(api("olga").post(answer_path(task.pk, "q"), {"response": {"action": "decline"}}), 403)
    detail = ok(api("alice").post(answer_path(task.pk, "q"), {"response": {"action": "decline"}}))
    assert detail["state"] == "queued"


# ---------------------------------------------------------------- cancel
def test_owner_cancels_a_waiting_task_at_once(api: Any, task_in: Any) -> None:
    task = task_in(S.AWAITING_INPUT)
    detail = ok(api("alice").post(f"{TASKS}/{task.pk}/cancel", {"reason": "not needed"}))
    assert detail["state"] == "cancelled" and detail["task"]["status"] == "cancelled"
    assert detail["cancel"]["requested_by"] == "alice"
    assert detail["cancel"]["reason"] == "not needed"


def test_cancel_of_a_running_task_records_intent(api: Any, task_in: Any) -> None:
    task = task_in(S.RUNNING)
    detail = ok(api("amy").post(f"{TASKS}/{task.pk}/cancel"))
    assert detail["state"] == "running" and detail["cancel"]["requested_by"] == "amy"


def test_cancel_of_an_ended_task_is_a_conflict(api: Any, task_in: Any) -> None:
    task = task_in(S.COMPLETED)
    problem(api("alice").post(f"{TASKS}/{task.pk}/cancel"), 409)


def test_force_cancel_needs_an_operator_and_a_reason(api: Any, task_in: Any) -> None:
    task = task_in(S.RUNNING)
    path = f"{TASKS}/{task.pk}/force-cancel"
    problem(api("alice").post(path, {"reason": "mine"}), 403)
    problem(api("amy").post(path, {"reason": "admin"}), 403)
    body = problem(api("olga").post(path, {"reason": "   "}), 422)
    assert body["detail"].startswith("Reason")
    detail = ok(api("olga").post(path, {"reason": "runaway job"}))
    assert detail["state"] == "cancelled" and detail["cancel"]["reason"] == "runaway job"
    problem(api("olga").post(path, {"reason": "again"}), 409)


def test_force_cancel_mid_effect_leaves_it_unknown(api: Any, task_in: Any) -> None:
    task = task_in(S.RUNNING)
    lifecycle.task_effect_intended(
        task_id=task.pk,
        attempt=task.attempt,
        step="deploy",
        idempotency_key=f"{task.pk}:deploy",
        idempotent=False,
    )
    detail = ok(api("olga").post(f"{TASKS}/{task.pk}/force-cancel", {"reason": "stuck"}))
    assert [e["state"] for e in detail["effects"]] == ["unknown"]


# ---------------------------------------------------------------- reconcile
def reconcile_path(task: Task, effect_id: Any = None) -> str:
    effect_id = effect_id if effect_id is not None else task.effects.get().pk
    return f"{TASKS}/{task.pk}/effects/{effect_id}/reconcile"


def test_operator_reconciles_an_unknown_effect_once(api: Any, task_in: Any) -> None:
    task = task_in(S.NEEDS_RECONCILIATION)
    path = reconcile_path(task)
    body = problem(api("olga").post(path, {"decision": "applied", "reason": "checked"}), 422)
    assert "external_ref" in body["errors"]
    problem(api("olga").post(path, {"decision": "maybe", "reason": "x"}), 422)
    problem(api("olga").post(path, {"decision": "not_applied"}), 422)
    detail = ok(
        api("olga").post(
            path, {"decision": "applied", "reason": "seen in console", "external_ref": "rollout-7"}
        )
    )
    assert detail["state"] == "queued"
    (effect,) = detail["effects"]
    assert effect["state"] == "reconciled_applied" and effect["external_ref"] == "rollout-7"
    assert effect["reconciled_by"] == "olga" and effect["reconcile_note"] == "seen in console"
    again = problem(api("olga").post(path, {"decision": "fail", "reason": "oops"}), 409)
    assert "already reconciled" in again["detail"]


def test_reconcile_fail_fails_the_task(api: Any, task_in: Any) -> None:
    task = task_in(S.NEEDS_RECONCILIATION)
    detail = ok(api("olga").post(reconcile_path(task), {"decision": "fail", "reason": "broken"}))
    assert detail["state"] == "failed" and detail["task"]["status"] == "failed"


def test_only_operators_reconcile(api: Any, task_in: Any) -> None:
    task = task_in(S.NEEDS_RECONCILIATION)
    body = {"decision": "not_applied", "reason": "x"}
    for name in ("alice", "amy", "carl"):
        problem(api(name).post(reconcile_path(task), body), 403)
    problem(api("bob").post(reconcile_path(task), body), 404)
    problem(api("olga").post(reconcile_path(task, 999999), body), 404)
    problem(api("olga").post(reconcile_path(task, "abc"), body), 404)


# ---------------------------------------------------------------- delegations
def test_named_approver_answers_after_the_grant_and_not_after_the_revoke(
    api: Any, paused_deploy: Any
) -> None:
    task = paused_deploy("alice")
    detail_path = f"{TASKS}/{task.pk}"
    problem(api("adam").get(detail_path), 404)
    grant = {"user": "adam", "delegation": "answer"}
    detail = ok(api("olga").post(f"{detail_path}/delegations/grant", grant))
    assert detail["delegations"] == [{"user": "adam", "delegation": "answer"}]
    assert ok(api("adam").get(detail_path))["input_requests"][0]["can_answer"] is True

    ok(api("olga").post(f"{detail_path}/delegations/revoke", grant))
    problem(api("adam").get(detail_path), 404)
    problem(api("adam").post(answer_path(task.pk, "approval"), APPROVE), 404)

    ok(api("olga").post(f"{detail_path}/delegations/grant", grant))
    assert ok(api("adam").post(answer_path(task.pk, "approval"), APPROVE))["state"] == "queued"
    actions = list(
        AuditEvent.objects.filter(task_id=task.pk, action__startswith="delegation.")
        .order_by("seq")
        .values_list("action", flat=True)
    )
    assert actions == ["delegation.granted", "delegation.revoked", "delegation.granted"]


def test_delegation_goes_only_to_a_member_of_the_tasks_tenant(api: Any, make_task: Any) -> None:
    task = make_task("alice")
    grant = f"{TASKS}/{task.pk}/delegations/grant"
    for username in ("bob", "nobody", "alice"):
        body = problem(api("olga").post(grant, {"user": username, "delegation": "view"}), 422)
        assert "user" in body["errors"]
    problem(api("olga").post(grant, {"user": "adam", "delegation": "admin"}), 422)


def test_only_operators_grant_and_revoking_what_is_not_held_is_404(
    api: Any, make_task: Any
) -> None:
    task = make_task("alice")
    grant = {"user": "adam", "delegation": "view"}
    for name in ("alice", "amy", "carl"):
        problem(api(name).post(f"{TASKS}/{task.pk}/delegations/grant", grant), 403)
    problem(api("olga").post(f"{TASKS}/{task.pk}/delegations/revoke", grant), 404)


def test_not_applied_is_a_409_while_the_attempt_that_left_the_effect_may_be_alive(
    api: Any, task_in: Any, actors: Any
) -> None:
    task = task_in(S.RUNNING)
    lifecycle.task_effect_intended(
        task_id=task.pk,
        attempt=task.attempt,
        step="deploy",
        idempotency_key=f"{task.pk}:deploy",
        idempotent=False,
    )
    lifecycle.task_force_cancel(task_id=task.pk, actor=actors["olga"], reason="stop")
    body = {"decision": "not_applied", "reason": "nothing downstream"}
    refused = problem(api("olga").post(reconcile_path(task), body), 409)
    assert "MCPTASKS_RECONCILE_MARGIN_S" in refused["detail"]
    assert task.effects.get().state == "unknown"
