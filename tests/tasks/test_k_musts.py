"""PROTOCOL §6 group K: one test per MUST of the tasks extension that applies to this server.

K5, K20, K21 and K22 concern ``subscriptions/listen`` and ``notifications/tasks``; they belong to
the live-updates issue, which adds that method. Results are validated against
``tasks-extension.schema.json`` (and the core schema for core shapes).
"""

from __future__ import annotations

import base64
import threading
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.utils import timezone

from audit.models import AuditEvent
from mcptasks import lifecycle, sweeps
from mcptasks.models import ApiToken, InputRequest, InputState, Task, TaskState
from tests.protocol.conftest import VERSION, McpClient, validate, validate_tools_call_result
from tests.tasks.conftest import TASKS, get_task

pytestmark = pytest.mark.django_db(transaction=True)

NOT_FOUND = "Failed to retrieve task: Task not found"
TASK_METHODS = ("tasks/get", "tasks/update", "tasks/cancel")
NO_EXTENSION = {"elicitation": {}, "sampling": {}}
ACK_FORBIDDEN_KEYS = {"taskId", "status", "result", "error", "inputRequests"}


def task_params(method: str, task_id: str) -> dict[str, Any]:
    params: dict[str, Any] = {"taskId": task_id}
    if method == "tasks/update":
        params["inputResponses"] = {}
    return params


def audit_actions(task_id: str) -> list[str]:
    return list(
        AuditEvent.objects.filter(task_id=task_id).order_by("id").values_list("action", flat=True)
    )


def assert_ack(result: dict[str, Any]) -> None:
    """The empty ack: ``resultType: complete`` and no task body (``_meta`` is allowed)."""
    assert result["resultType"] == "complete"
    assert set(result) - {"_meta"} == {"resultType"}
    assert not ACK_FORBIDDEN_KEYS & set(result)


def wait_for_input(
    mcp: McpClient,
    start_task: Any,
    run_jobs: Any,
    tool: str,
    arguments: dict[str, Any] | None = None,
) -> tuple[str, dict[str, Any]]:
    task_id = start_task(tool, arguments)
    run_jobs()
    task = get_task(mcp, task_id)
    assert task["status"] == "input_required", task
    return task_id, task


# ---------------------------------------------------------------- negotiation (K1–K4, K6)
def test_K1_discover_advertises_the_extension_as_an_empty_object(mcp):
    result = mcp.call("server/discover").result
    validate("DiscoverResult", result)
    assert result["capabilities"]["extensions"][TASKS] == {}
    validate("TasksExtensionCapability", result["capabilities"]["extensions"][TASKS], ext=True)


def test_K2_no_create_task_result_unless_this_request_declares_the_extension(mcp):
    declared = mcp.tool("echo_auto", {"text": "a"})
    assert declared.result["resultType"] == "task"
    # Declared on the request before, not on this one: inline result, never a task.
    reply = mcp.tool("echo_auto", {"text": "b"}, capabilities=NO_EXTENSION)
    assert reply.status == 200, reply.body
    validate_tools_call_result(reply.result)
    assert reply.result["resultType"] == "complete"
    assert "taskId" not in reply.result
    assert reply.result["structuredContent"] == {"text": "b"}
    assert Task.objects.count() == 1


def test_K3_task_only_tool_without_the_extension_gets_32021_with_required_capabilities(mcp):
    reply = mcp.tool("echo_task", {"text": "x"}, capabilities=NO_EXTENSION)
    assert reply.status == 400
    validate("MissingRequiredClientCapabilityError", reply.body)
    assert reply.error["code"] == -32021
    assert reply.error["data"]["requiredCapabilities"]["extensions"][TASKS] == {}
    assert Task.objects.count() == 0


@pytest.mark.parametrize("method", TASK_METHODS)
def test_K4_task_methods_without_the_extension_get_32021_before_any_lookup(
    mcp, mcp_for, start_task, method
):
    # An id that does not exist: the gate answers before the lookup would say "not found".
    reply = mcp.call(method, task_params(method, "gate-test"), capabilities=NO_EXTENSION)
    assert reply.status == 400, reply.body
    assert reply.error["code"] == -32021
    assert reply.error["data"]["requiredCapabilities"]["extensions"][TASKS] == {}
    # Malformed params too: the gate comes before params validation.
    reply = mcp.call(method, {"taskId": 42}, capabilities=NO_EXTENSION)
    assert reply.error["code"] == -32021
    # A real task, the caller's own or another principal's: refused the same, nothing changes.
    task_id = start_task("ask_twice")
    for client in (mcp, mcp_for("bob")):
        reply = client.call(method, task_params(method, task_id), capabilities=NO_EXTENSION)
        assert reply.error["code"] == -32021
    assert Task.objects.get(pk=task_id).cancel_requested_at is None
    # Legacy-only capabilities do not declare the extension (K28).
    legacy = {"tasks": {"requests": {"tools": {"call": {}}}, "cancel": {}, "list": {}}}
    assert (
        mcp.call(method, task_params(method, task_id), capabilities=legacy).error["code"] == -32021
    )


def test_K6_only_tools_call_ever_answers_with_a_create_task_result(mcp, start_task, run_jobs):
    task_id = start_task("ask_twice")
    run_jobs()
    results = [
        mcp.call("server/discover").result,
        mcp.call("tools/list").result,
        mcp.call("tasks/get", {"taskId": task_id}).result,
        mcp.call("tasks/update", {"taskId": task_id, "inputResponses": {}}).result,
        mcp.call("tasks/cancel", {"taskId": task_id}).result,
    ]
    assert all(result["resultType"] == "complete" for result in results)


# ---------------------------------------------------------------- creation (K7–K9)
def test_K7_create_task_result_has_result_type_task_and_no_other_result_does(
    mcp, start_task, run_jobs
):
    reply = mcp.tool("echo_task", {"text": "x"})
    validate("CreateTaskResult", reply.result, ext=True)
    assert reply.result["resultType"] == "task"
    run_jobs()
    got = get_task(mcp, reply.result["taskId"])
    assert got["resultType"] == "complete"
    assert got["result"]["resultType"] == "complete"  # the inlined CallToolResult
    inline = mcp.tool("echo_auto", {"text": "x"}, capabilities=NO_EXTENSION).result
    assert inline["resultType"] == "complete"


def test_K8_create_task_result_is_flat_with_the_renamed_fields(mcp):
    result = mcp.tool("echo_task", {"text": "x"}).result
    validate("CreateTaskResult", result, ext=True)
    for key in ("taskId", "status", "createdAt", "lastUpdatedAt", "ttlMs"):
        assert key in result
    assert result["status"] == "working"
    assert result["ttlMs"] is None or (isinstance(result["ttlMs"], int) and result["ttlMs"] > 0)
    assert isinstance(result["pollIntervalMs"], int) and result["pollIntervalMs"] > 0
    for key in ("task", "ttl", "pollInterval", "requestState", "result", "error", "inputRequests"):
        assert key not in result
    assert "io.modelcontextprotocol/related-task" not in result.get("_meta", {})
    for stamp in ("createdAt", "lastUpdatedAt"):
        assert result[stamp][:19] == timezone.datetime.fromisoformat(
            result[stamp].replace("Z", "+00:00")
        ).strftime("%Y-%m-%dT%H:%M:%S")


def test_K9_create_result_only_after_commit_task_get_resolves(mcp, mcp_for):
    """No worker has run: the task is durable the moment its CreateTaskResult is sent, and
    resolves for a fresh client on another thread (another connection)."""
    created = mcp.tool("echo_task", {"text": "durable"}).result
    answers: list[dict[str, Any]] = []

    def poll() -> None:
        answers.append(McpClient(mcp.token).call("tasks/get", {"taskId": created["taskId"]}).body)

    thread = threading.Thread(target=poll)
    thread.start()
    thread.join()
    got = answers[0]["result"]
    validate("GetTaskResult", got, ext=True)
    assert got["taskId"] == created["taskId"]
    assert got["status"] == "working"
    assert got["createdAt"] == created["createdAt"]
    assert "task.created" in audit_actions(created["taskId"])


# ---------------------------------------------------------------- tasks/get (K10–K16)
def test_K10_tasks_get_returns_complete_and_the_variant_of_each_status(mcp, start_task, run_jobs):
    working = start_task("echo_task", {"text": "w"})
    assert get_task(mcp, working)["status"] == "working"
    validate("WorkingTask", get_task(mcp, working), ext=True)

    waiting = start_task("ask_twice")
    completed = start_task("echo_task", {"text": "c"})
    failed = start_task("crash_task")
    cancelled = start_task("ask_twice")
    run_jobs()
    mcp.call("tasks/cancel", {"taskId": cancelled})

    expected = {
        waiting: ("input_required", "InputRequiredTask"),
        completed: ("completed", "CompletedTask"),
        failed: ("failed", "FailedTask"),
        cancelled: ("cancelled", "CancelledTask"),
    }
    for task_id, (status, definition) in expected.items():
        got = get_task(mcp, task_id)
        assert got["resultType"] == "complete"
        assert got["status"] == status, got
        validate(definition, {k: v for k, v in got.items() if k != "resultType"}, ext=True)
    assert "result" not in get_task(mcp, failed)
    assert "error" not in get_task(mcp, completed)
    assert set(get_task(mcp, cancelled)) & {"result", "error", "inputRequests"} == set()


def test_K11_input_required_lists_all_outstanding_requests(mcp, start_task, run_jobs):
    task_id, task = wait_for_input(mcp, start_task, run_jobs, "ask_twice")
    assert set(task["inputRequests"]) == {"name", "confirm"}
    for request in task["inputRequests"].values():
        validate("ElicitRequest", request, ext=True)
        assert request["method"] == "elicitation/create"
    # A snapshot: the same keys repeat on every poll until answered.
    assert get_task(mcp, task_id)["inputRequests"] == task["inputRequests"]


@pytest.mark.parametrize(
    "capabilities",
    [
        {"extensions": {TASKS: {}}},
        {"sampling": {}, "extensions": {TASKS: {}}},
        {"elicitation": {"url": {}}, "extensions": {TASKS: {}}},
    ],
)
def test_K11_M9_tasks_get_surfaces_only_input_kinds_this_poll_declares(
    mcp, start_task, run_jobs, capabilities
):
    """PROTOCOL M9 and §8 item 4: a poll that does not declare (form) elicitation is never
    shown elicitation requests; it sees the task as working until someone answers."""
    task_id, _ = wait_for_input(mcp, start_task, run_jobs, "ask_twice")
    reply = mcp.call("tasks/get", {"taskId": task_id}, capabilities=capabilities)
    validate("GetTaskResult", reply.result, ext=True)
    assert reply.result["status"] == "working"
    assert "inputRequests" not in reply.result
    for declared in ({}, {"form": {}}, {"form": {}, "url": {}}):
        got = mcp.call(
            "tasks/get",
            {"taskId": task_id},
            capabilities={"elicitation": declared, "extensions": {TASKS: {}}},
        ).result
        assert set(got["inputRequests"]) == {"name", "confirm"}, declared


def test_K11_partial_update_keeps_input_required_with_only_pending_keys(mcp, start_task, run_jobs):
    task_id, _ = wait_for_input(mcp, start_task, run_jobs, "ask_twice")
    reply = mcp.call(
        "tasks/update",
        {
            "taskId": task_id,
            "inputResponses": {"name": {"action": "accept", "content": {"name": "Ada"}}},
        },
    )
    assert_ack(reply.result)
    got = get_task(mcp, task_id)
    assert got["status"] == "input_required"
    assert list(got["inputRequests"]) == ["confirm"]
    assert run_jobs() == 0  # nothing to resume until every key is answered
    reply = mcp.call(
        "tasks/update",
        {
            "taskId": task_id,
            "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": True}}},
        },
    )
    assert_ack(reply.result)
    run_jobs()
    got = get_task(mcp, task_id)
    assert got["status"] == "completed", got
    assert got["result"]["structuredContent"] == {
        "name": {"name": "Ada"},
        "confirm": {"confirm": True},
    }


def test_K12_completed_result_is_exactly_what_the_call_would_have_returned(
    mcp, start_task, run_jobs
):
    inline = mcp.tool("echo_auto", {"text": "same"}, capabilities=NO_EXTENSION).result
    task_id = start_task("echo_auto", {"text": "same"})
    run_jobs()
    got = get_task(mcp, task_id)
    validate("CompletedTask", got, ext=True)
    validate("CallToolResult", got["result"])
    assert got["result"] == {k: v for k, v in inline.items() if k != "_meta"}


def test_K13_failed_task_carries_the_json_rpc_error_object(mcp, start_task, run_jobs):
    task_id = start_task("crash_task")
    run_jobs()
    got = get_task(mcp, task_id)
    assert got["status"] == "failed"
    validate("FailedTask", got, ext=True)
    validate("Error", got["error"], ext=True)
    assert got["error"]["code"] == -32603
    assert isinstance(got["error"]["message"], str) and got["error"]["message"]
    assert got["statusMessage"]  # SHOULD: a diagnostic statusMessage
    assert "result" not in got


def test_K14_a_tool_error_completes_the_task_with_is_error_never_failed(mcp, start_task, run_jobs):
    task_id = start_task("tool_error_task")
    run_jobs()
    got = get_task(mcp, task_id)
    assert got["status"] == "completed", got
    validate("CompletedTask", got, ext=True)
    assert got["result"]["isError"] is True
    assert got["result"]["content"][0]["text"] == "business failure"
    assert "error" not in got


def test_K15_a_terminal_status_never_changes(mcp, start_task, run_jobs, users):
    from audit.record import Actor

    completed = start_task("echo_task", {"text": "final"})
    cancelled = start_task("ask_twice")
    run_jobs()
    mcp.call("tasks/cancel", {"taskId": cancelled})
    before = {task_id: get_task(mcp, task_id) for task_id in (completed, cancelled)}

    for task_id in before:
        assert_ack(mcp.call("tasks/cancel", {"taskId": task_id}).result)
        assert_ack(
            mcp.call(
                "tasks/update",
                {
                    "taskId": task_id,
                    "inputResponses": {"name": {"action": "accept", "content": {"name": "late"}}},
                },
            ).result
        )
        with pytest.raises(lifecycle.InvalidTransition):
            lifecycle.task_fail(
                task_id=task_id,
                actor=Actor.system("test"),
                error=lifecycle.error_object("late failure"),
            )
        with pytest.raises(lifecycle.InvalidTransition):
            lifecycle.task_force_cancel(
                task_id=task_id, actor=Actor.for_user(users["olga"]), reason="too late"
            )
        with pytest.raises(lifecycle.InvalidTransition):
            lifecycle.task_claim(task_id=task_id, worker="late-worker")
    # Past the TTL (but inside the grace period) the expiry sweep leaves terminal tasks alone.
    with time_machine.travel(timezone.now() + timedelta(hours=1, minutes=1), tick=False):
        sweeps.expire_tasks()
    run_jobs()
    for task_id, snapshot in before.items():
        assert get_task(mcp, task_id) == snapshot


def test_K16_unknown_purged_and_foreign_task_ids_answer_the_same_32602(
    mcp, mcp_for, start_task, run_jobs, settings
):
    mine = start_task("echo_task", {"text": "mine"})
    purged = start_task("echo_task", {"text": "purged"})
    bobs = start_task("echo_task", {"text": "bob's"}, client=mcp_for("bob"))
    adams = start_task("echo_task", {"text": "adam's"}, client=mcp_for("adam"))
    run_jobs()
    Task.objects.filter(pk=purged).update(expires_at=timezone.now() - timedelta(days=1))
    settings.MCPTASKS_TERMINAL_GRACE_S = 60
    assert sweeps.purge_tasks() == 1

    for method in TASK_METHODS:
        errors = []
        for task_id in ("tasks-conformance-nonexistent-12345", purged, bobs, adams, "x" * 500):
            reply = mcp.call(method, task_params(method, task_id))
            assert reply.status == 200, reply.body
            validate("JSONRPCErrorResponse", reply.body)
            errors.append(reply.error)
        assert errors == [{"code": -32602, "message": NOT_FOUND}] * len(errors), method
    # Nothing about the foreign tasks changed.
    assert Task.objects.get(pk=bobs).cancel_requested_at is None
    assert get_task(mcp, mine)["status"] == "completed"


# ---------------------------------------------------------------- tasks/update (K17, K19)
def test_K17_a_successful_update_is_exactly_the_empty_ack(mcp, start_task, run_jobs):
    task_id, _ = wait_for_input(mcp, start_task, run_jobs, "ask_twice")
    reply = mcp.call(
        "tasks/update",
        {
            "taskId": task_id,
            "inputResponses": {
                "name": {"action": "accept", "content": {"name": "Ada"}},
                "confirm": {"action": "decline"},
            },
        },
    )
    validate("UpdateTaskResult", reply.result, ext=True)
    assert_ack(reply.result)
    assert audit_actions(task_id).count("task.input_answered") == 2


def test_K17_unknown_keys_are_ignored_with_the_ack(mcp, start_task, run_jobs):
    task_id, _ = wait_for_input(mcp, start_task, run_jobs, "ask_twice")
    reply = mcp.call(
        "tasks/update", {"taskId": task_id, "inputResponses": {"unknown-key": {"ignored": True}}}
    )
    assert_ack(reply.result)
    got = get_task(mcp, task_id)
    assert got["status"] == "input_required"
    assert set(got["inputRequests"]) == {"name", "confirm"}
    assert "task.input_answered" not in audit_actions(task_id)


def test_K17_content_failing_its_schema_is_refused_naming_the_key_and_stays_pending(
    mcp, start_task, run_jobs
):
    task_id, _ = wait_for_input(mcp, start_task, run_jobs, "ask_twice")
    reply = mcp.call(
        "tasks/update",
        {
            "taskId": task_id,
            "inputResponses": {
                "confirm": {"action": "accept", "content": {"confirm": True}},
                "name": {"action": "accept", "content": {"name": 42}},
            },
        },
    )
    assert reply.status == 200
    validate("JSONRPCErrorResponse", reply.body)
    assert reply.error["code"] == -32602
    assert "'name'" in reply.error["message"]
    assert reply.error["data"] == {"key": "name"}
    # Neither answer was applied: the request with bad content stays pending, and so does
    # the one sent beside it.
    got = get_task(mcp, task_id)
    assert set(got["inputRequests"]) == {"name", "confirm"}
    assert InputRequest.objects.filter(task_id=task_id, state=InputState.PENDING).count() == 2
    # A bad action is refused the same way.
    reply = mcp.call(
        "tasks/update", {"taskId": task_id, "inputResponses": {"confirm": {"action": "maybe"}}}
    )
    assert reply.error["code"] == -32602 and "'confirm'" in reply.error["message"]


def test_K17_twenty_parallel_answers_to_one_key_accept_exactly_one(mcp, start_task, run_jobs):
    task_id, _ = wait_for_input(mcp, start_task, run_jobs, "swallowing_ask")
    barrier = threading.Barrier(20)
    replies: dict[int, Any] = {}

    def answer(number: int) -> None:
        client = McpClient(mcp.token)
        barrier.wait()
        replies[number] = client.call(
            "tasks/update",
            {
                "taskId": task_id,
                "inputResponses": {"q": {"action": "accept", "content": {"ok": number % 2 == 0}}},
            },
        )

    threads = [threading.Thread(target=answer, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(replies) == 20
    for reply in replies.values():
        assert reply.status == 200, reply.body
        assert_ack(reply.result)
    request = InputRequest.objects.get(task_id=task_id, key="q")
    assert request.state == InputState.ANSWERED
    assert audit_actions(task_id).count("task.input_answered") == 1
    assert Task.objects.get(pk=task_id).state == TaskState.QUEUED
    run_jobs()
    got = get_task(mcp, task_id)
    assert got["status"] == "completed"
    assert got["result"]["content"][0]["text"] == "answered accept"
    assert audit_actions(task_id).count("task.started") == 2


def test_K11_parallel_answers_to_different_keys_resume_the_task_once(mcp, start_task, run_jobs):
    task_id, _ = wait_for_input(mcp, start_task, run_jobs, "ask_twice")
    responses = {
        "name": {"action": "accept", "content": {"name": "Ada"}},
        "confirm": {"action": "accept", "content": {"confirm": False}},
    }
    barrier = threading.Barrier(len(responses))
    acks: list[dict[str, Any]] = []

    def answer(key: str) -> None:
        client = McpClient(mcp.token)
        barrier.wait()
        acks.append(
            client.call(
                "tasks/update", {"taskId": task_id, "inputResponses": {key: responses[key]}}
            ).result
        )

    threads = [threading.Thread(target=answer, args=(key,)) for key in responses]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for ack in acks:
        assert_ack(ack)
    assert Task.objects.get(pk=task_id).state == TaskState.QUEUED
    assert audit_actions(task_id).count("task.input_answered") == 2
    run_jobs()
    got = get_task(mcp, task_id)
    assert got["status"] == "completed"
    assert got["result"]["structuredContent"] == {
        "name": {"name": "Ada"},
        "confirm": {"confirm": False},
    }
    assert audit_actions(task_id).count("task.started") == 2  # resumed exactly once


def test_K19_input_request_keys_are_never_reused_in_a_tasks_life(mcp, start_task, run_jobs):
    task_id, _ = wait_for_input(mcp, start_task, run_jobs, "ask_twice")
    mcp.call(
        "tasks/update",
        {
            "taskId": task_id,
            "inputResponses": {"name": {"action": "accept", "content": {"name": "Ada"}}},
        },
    )
    # Answered keys are not reissued; answering one again is ignored.
    assert "name" not in get_task(mcp, task_id)["inputRequests"]
    assert_ack(
        mcp.call(
            "tasks/update",
            {
                "taskId": task_id,
                "inputResponses": {"name": {"action": "accept", "content": {"name": "Eve"}}},
            },
        ).result
    )
    assert InputRequest.objects.get(task_id=task_id, key="name").response["content"] == {
        "name": "Ada"
    }

    # A tool that asks the same key twice fails rather than reuse the key.
    reuse = start_task("ask_same_key_twice")
    run_jobs()
    mcp.call(
        "tasks/update",
        {"taskId": reuse, "inputResponses": {"k": {"action": "accept", "content": {"ok": True}}}},
    )
    run_jobs()
    got = get_task(mcp, reuse)
    assert got["status"] == "failed", got
    assert "'k'" in got["error"]["message"] and "twice" in got["error"]["message"]
    assert InputRequest.objects.filter(task_id=reuse).count() == 1


# ---------------------------------------------------------------- tasks/cancel (K18)
def test_K18_cancel_of_a_suspended_task_is_immediate_and_acknowledged(mcp, start_task, run_jobs):
    task_id, _ = wait_for_input(mcp, start_task, run_jobs, "ask_twice")
    reply = mcp.call("tasks/cancel", {"taskId": task_id})
    validate("CancelTaskResult", reply.result, ext=True)
    assert_ack(reply.result)
    got = get_task(mcp, task_id)
    assert got["status"] == "cancelled"
    validate("CancelledTask", got, ext=True)
    assert not InputRequest.objects.filter(task_id=task_id, state=InputState.PENDING).exists()
    assert run_jobs() == 0
    actions = audit_actions(task_id)
    assert actions.count("task.cancel_requested") == 1
    assert actions.count("task.cancelled") == 1


def test_K18_cancel_of_a_queued_task_is_immediate(mcp, start_task, run_jobs):
    task_id = start_task("echo_task", {"text": "never runs"})
    assert_ack(mcp.call("tasks/cancel", {"taskId": task_id}).result)
    assert get_task(mcp, task_id)["status"] == "cancelled"
    run_jobs()  # the queued run finds the task terminal and does nothing
    assert get_task(mcp, task_id)["status"] == "cancelled"
    assert "task.started" not in audit_actions(task_id)


def test_K18_cancel_of_a_task_whose_worker_died_is_honoured_when_the_reaper_requeues_it(
    mcp, start_task, run_jobs
):
    """Intent recorded while running; the worker dies; the requeued task is not running any
    more, so it is cancelled at once rather than run again (DESIGN §3 Cancel)."""
    task_id = start_task("echo_task", {"text": "must not run"})
    lifecycle.task_claim(task_id=task_id, worker="a-worker-that-dies")
    assert_ack(mcp.call("tasks/cancel", {"taskId": task_id}).result)
    assert get_task(mcp, task_id)["status"] == "working"  # running: stops at a safe point
    Task.objects.filter(pk=task_id).update(lease_expires_at=timezone.now() - timedelta(minutes=1))
    assert sweeps.reap_leases() == 1
    assert get_task(mcp, task_id)["status"] == "cancelled"
    run_jobs()
    assert get_task(mcp, task_id)["status"] == "cancelled"
    assert audit_actions(task_id)[-3:] == [
        "task.cancel_requested",
        "task.requeued",
        "task.cancelled",
    ]
    assert "task.completed" not in audit_actions(task_id)


def test_K18_cancel_of_a_terminal_task_is_an_idempotent_ack(mcp, start_task, run_jobs):
    task_id = start_task("echo_task", {"text": "done"})
    run_jobs()
    before = get_task(mcp, task_id)
    for _ in range(2):
        assert_ack(mcp.call("tasks/cancel", {"taskId": task_id}).result)
    assert get_task(mcp, task_id) == before
    assert "task.cancel_requested" not in audit_actions(task_id)
    # Cancelling a cancelled task again is acknowledged and audited once.
    waiting, _ = wait_for_input(mcp, start_task, run_jobs, "ask_twice")
    for _ in range(3):
        assert_ack(mcp.call("tasks/cancel", {"taskId": waiting}).result)
    assert audit_actions(waiting).count("task.cancel_requested") == 1


def test_K18_audit_rows_record_creation_answers_and_cancel(mcp, users, start_task, run_jobs):
    task_id, _ = wait_for_input(mcp, start_task, run_jobs, "ask_twice")
    mcp.call(
        "tasks/update",
        {
            "taskId": task_id,
            "inputResponses": {"name": {"action": "accept", "content": {"name": "Ada"}}},
        },
    )
    mcp.call("tasks/cancel", {"taskId": task_id})
    events = {event.action: event for event in AuditEvent.objects.filter(task_id=task_id)}
    assert list(
        AuditEvent.objects.filter(task_id=task_id).order_by("id").values_list("action", flat=True)
    ) == [
        "task.created",
        "task.started",
        "task.input_requested",
        "task.input_answered",
        "task.cancel_requested",
        "task.cancelled",
    ]
    alice = str(users["alice"].pk)
    for action in ("task.created", "task.input_answered", "task.cancel_requested"):
        assert events[action].actor_kind == "principal"
        assert events[action].actor_id == alice
        assert events[action].request_id  # tied to the MCP request that caused it
    assert events["task.created"].data["tool"] == "ask_twice"
    assert events["task.input_answered"].data["key"] == "name"
    assert events["task.input_answered"].data["via"] == "mcp"
    assert events["task.cancel_requested"].data["reason"] == "tasks/cancel"


# ---------------------------------------------------------------- security (K23, K24)
def test_K23_task_ids_are_unguessable(mcp):
    ids = {mcp.tool("echo_task", {"text": str(n)}).result["taskId"] for n in range(25)}
    assert len(ids) == 25
    for task_id in ids:
        raw = base64.urlsafe_b64decode(task_id + "=" * (-len(task_id) % 4))
        assert len(raw) * 8 >= 128


def test_K24_every_task_request_is_authenticated_and_authorized_against_the_owner(
    mcp, mcp_for, cast, start_task, run_jobs
):
    task_id, _ = wait_for_input(mcp, start_task, run_jobs, "ask_twice")
    anonymous = McpClient(None)
    revoked = McpClient(cast["adam"]["token"])
    ApiToken.objects.filter(user=cast["adam"]["user"]).update(revoked_at=timezone.now())
    for method in TASK_METHODS:
        for client in (anonymous, revoked, McpClient("mcpt_bogus_token")):
            reply = client.call(method, task_params(method, task_id))
            assert reply.status == 401, reply.body
            assert reply.headers["www-authenticate"].startswith("Bearer ")
    # Another tenant's member, and a member of the same tenant: "not found".
    for name in ("bob", "amy"):
        answer = mcp_for(name).call(
            "tasks/update",
            {
                "taskId": task_id,
                "inputResponses": {"name": {"action": "accept", "content": {"name": "intruder"}}},
            },
        )
        if name == "bob":
            assert answer.error == {"code": -32602, "message": NOT_FOUND}
        else:
            assert_ack(answer.result)  # amy (acme admin) may see it, but not answer for alice
    carl = mcp_for("carl")  # an auditor sees the task but may neither answer nor cancel
    seen = get_task(carl, task_id)
    assert seen["status"] == "working" and "inputRequests" not in seen
    assert carl.call("tasks/cancel", {"taskId": task_id}).error["code"] == -32602
    assert InputRequest.objects.filter(task_id=task_id, state=InputState.PENDING).count() == 2
    assert Task.objects.get(pk=task_id).cancel_requested_at is None
    assert get_task(mcp, task_id)["status"] == "input_required"


# ---------------------------------------------------------------- removed and legacy (K25–K31)
@pytest.mark.parametrize("method", ["tasks/result", "tasks/list"])
def test_K25_removed_task_methods_get_32601_with_404(mcp, method):
    reply = mcp.call(method, {"taskId": "tasks-conformance-isolation-probe"})
    assert reply.status == 404
    assert reply.error["code"] == -32601


def test_K26_a_legacy_task_param_is_ignored(mcp):
    legacy = {"ttl": 60000, "pollInterval": 100}
    plain = mcp.call(
        "tools/call",
        {"name": "echo_auto", "arguments": {"text": "l"}, "task": legacy},
        capabilities=NO_EXTENSION,
    )
    assert plain.status == 200, plain.body
    assert plain.result["resultType"] == "complete"
    assert Task.objects.count() == 0
    tasked = mcp.call(
        "tools/call", {"name": "echo_auto", "arguments": {"text": "l"}, "task": legacy}
    )
    assert tasked.result["resultType"] == "task"
    assert Task.objects.get().ttl_ms != 60000


def test_K27_legacy_tasks_capability_is_never_advertised(mcp):
    capabilities = mcp.call("server/discover").result["capabilities"]
    assert "tasks" not in capabilities


def test_K28_a_legacy_only_declaration_counts_as_non_declaring(mcp):
    legacy = {"elicitation": {}, "tasks": {"requests": {"tools": {"call": {}}}}}
    assert mcp.tool("echo_task", {"text": "x"}, capabilities=legacy).error["code"] == -32021
    reply = mcp.tool("echo_auto", {"text": "x"}, capabilities=legacy)
    assert reply.result["resultType"] == "complete"
    assert mcp.call("tasks/get", {"taskId": "x"}, capabilities=legacy).error["code"] == -32021
    assert Task.objects.count() == 0


def test_K29_under_2025_11_25_the_extension_enables_nothing(mcp):
    old = "2025-11-25"
    params = {
        "name": "echo_task",
        "arguments": {"text": "x"},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": old,
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
        },
    }
    reply = mcp.call("tools/call", params, headers={"mcp-protocol-version": old})
    assert reply.status == 400
    assert reply.error["code"] == -32022
    assert reply.error["data"]["supported"] == [VERSION]
    assert Task.objects.count() == 0


@pytest.mark.parametrize("method", TASK_METHODS)
def test_K30_mcp_name_must_equal_the_task_id(mcp, start_task, method):
    task_id = start_task("ask_twice")
    reply = mcp.call(method, task_params(method, task_id), headers={"mcp-name": "someone-else"})
    assert reply.status == 400
    assert reply.error["code"] == -32020
    # Base64-sentinel form of the right id is the same id.
    encoded = "=?base64?" + base64.b64encode(task_id.encode()).decode() + "?="
    assert (
        mcp.call(method, task_params(method, task_id), headers={"mcp-name": encoded}).status == 200
    )
    # Missing is tolerated on tasks/* (PROTOCOL §9: FastMCP omits it).
    assert mcp.call(method, task_params(method, task_id), headers={"mcp-name": None}).status == 200


def test_K30_strict_mode_also_rejects_a_missing_mcp_name(mcp, start_task, settings):
    task_id = start_task("ask_twice")
    settings.MCPTASKS_STRICT_MCP_NAME = True
    reply = mcp.call("tasks/get", {"taskId": task_id}, headers={"mcp-name": None})
    assert reply.status == 400 and reply.error["code"] == -32020


@pytest.mark.parametrize(
    "method", ["tasks/create", "tasks/delete", "tasks/status", "notifications/tasks/status"]
)
def test_K31_no_other_methods_under_tasks(mcp, method):
    reply = mcp.call(method, {"taskId": "x"})
    assert reply.status == 404, reply.body
    assert reply.error["code"] == -32601
