"""PROTOCOL §6 group M (tools, MRTR, elicitation, progress): one test per MUST that applies.

Every reply is validated by :func:`assert_wire` (schemas plus the checks they cannot express).
The MRTR security cases (tampered, expired, foreign requestState; effects across rounds) are in
test_mrtr.py.
"""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator

from audit.models import AuditEvent
from mcptasks.models import InputRequest, Task
from tests import toolpack
from tests.protocol.conftest import TASK_CAPS, CheckedClient, assert_error_response, validate

pytestmark = pytest.mark.django_db(transaction=True)

ACCEPT_OK = {"action": "accept", "content": {"ok": True}}


def error_of(reply, code: int) -> dict:
    error = assert_error_response(reply.status, reply.body)
    assert error["code"] == code, error
    return error


def retry(client: CheckedClient, name: str, first: dict, responses: dict, **kwargs):
    return client.call(
        "tools/call",
        {"name": name, "inputResponses": responses, "requestState": first["requestState"]},
        **kwargs,
    )


# ---------------------------------------------------------------- M1 / M2
def test_M1_tools_capability_declared_and_tools_list_answers(checked: CheckedClient) -> None:
    capabilities = checked.call("server/discover").result["capabilities"]
    assert "tools" in capabilities
    tools = checked.call("tools/list").result["tools"]
    assert tools and {t["name"] for t in tools} >= {"echo_task", "mrtr_confirm_then_apply"}


def test_M2_every_input_schema_is_a_valid_object_schema(checked: CheckedClient) -> None:
    for tool in checked.call("tools/list").result["tools"]:
        validate("Tool", tool)
        schema = tool["inputSchema"]
        assert isinstance(schema, dict) and schema["type"] == "object", tool["name"]
        Draft202012Validator.check_schema(schema)
        if "outputSchema" in tool:
            Draft202012Validator.check_schema(tool["outputSchema"])
        assert 1 <= len(tool["name"]) <= 64 and tool["description"], tool["name"]


# ---------------------------------------------------------------- M3
def test_M3_structured_content_conforms_to_the_output_schema(checked: CheckedClient) -> None:
    tools = {t["name"]: t for t in checked.call("tools/list").result["tools"]}
    schema = tools["structured_total"]["outputSchema"]
    result = checked.call(
        "tools/call", {"name": "structured_total", "arguments": {"values": [1, 2, 3]}}
    ).result
    assert result["structuredContent"] == {"total": 6}
    Draft202012Validator(schema).validate(result["structuredContent"])
    assert result["content"][0]["type"] == "text"  # serialised into a text block too


def test_M3_a_result_breaking_the_output_schema_is_never_sent(checked: CheckedClient) -> None:
    reply = checked.call(
        "tools/call", {"name": "structured_total", "arguments": {"values": [1], "corrupt": True}}
    )
    error = error_of(reply, -32603)
    assert "many" not in error["message"]


# ---------------------------------------------------------------- M4
def test_M4_unknown_tool_is_a_protocol_error(checked: CheckedClient) -> None:
    reply = checked.call("tools/call", {"name": "no_such_tool"})
    assert "no_such_tool" in error_of(reply, -32602)["message"]


@pytest.mark.parametrize(
    "params",
    [
        {"name": 42},
        {"name": ""},
        {},
        {"name": "echo_task", "arguments": [1, 2]},
        {"name": "echo_task", "arguments": "text"},
    ],
)
def test_M4_malformed_call_is_a_protocol_error(checked: CheckedClient, params: dict) -> None:
    reply = checked.call(
        "tools/call", params, headers={"mcp-name": str(params.get("name", "x")) or "x"}
    )
    assert reply.body["error"]["code"] in (-32602, -32020)


def test_M4_execution_failures_are_is_error_results(checked: CheckedClient) -> None:
    result = checked.call("tools/call", {"name": "inline_tool_error"}).result
    assert result["isError"] is True
    assert result["content"][0]["text"] == "the quota is exhausted"


# ---------------------------------------------------------------- M5
@pytest.mark.parametrize(
    "arguments", [{"values": "1,2"}, {"values": [1, "2"]}, {}, {"values": [1], "extra": True}]
)
def test_M5_inputs_are_validated_before_the_tool_runs(
    checked: CheckedClient, arguments: dict
) -> None:
    result = checked.call("tools/call", {"name": "structured_total", "arguments": arguments}).result
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith("Invalid arguments for structured_total")


def test_M5_outputs_are_sanitised(checked: CheckedClient) -> None:
    toolpack.PROTOCOL_PROBES.clear()
    reply = checked.call("tools/call", {"name": "inline_boom"})
    error = error_of(reply, -32603)
    assert toolpack.PROTOCOL_PROBES["inline_boom.runs"] == 1
    assert "hunter2" not in str(reply.body) and "Traceback" not in str(reply.body)
    assert "inline_boom" in error["message"]


def test_M5_access_control_on_every_call(checked_for) -> None:
    anonymous = CheckedClient(None)
    assert anonymous.call("tools/call", {"name": "inline_tool_error"}).status == 401
    assert anonymous.call("tools/list").status == 401


# ---------------------------------------------------------------- M6 / M7 / M8
def test_M6_input_required_result_only_on_tools_call(checked: CheckedClient, run_jobs) -> None:
    created = checked.call("tools/call", {"name": "confirm_before_task"})
    assert created.result["resultType"] == "input_required"  # tools/call: allowed
    task = checked.call("tools/call", {"name": "ask_twice"}).result
    run_jobs()
    got = checked.call("tasks/get", {"taskId": task["taskId"]}).result
    # A task waiting for input is a complete tasks/get result whose *status* is input_required.
    assert got["resultType"] == "complete" and got["status"] == "input_required"
    for method in ("tools/list", "server/discover"):
        assert checked.call(method).result["resultType"] == "complete"


def test_M7_input_required_result_has_result_type_and_requests(checked: CheckedClient) -> None:
    for name in (
        "mrtr_confirm_then_apply",
        "mrtr_sample",
        "mrtr_roots",
        "mrtr_two_rounds_then_apply",
    ):
        result = checked.call("tools/call", {"name": name}).result
        assert result["resultType"] == "input_required"
        assert result["inputRequests"] and isinstance(result["requestState"], str)


def test_M8_input_request_keys_are_unique_and_methods_are_the_three(checked: CheckedClient) -> None:
    result = checked.call(
        "tools/call", {"name": "test_input_required_result_multiple_inputs"}, check=False
    )
    if "error" in result.body:  # the conformance fixtures are not loaded outside conformance mode
        result = checked.call("tools/call", {"name": "mrtr_two_rounds_then_apply"})
    requests = result.result["inputRequests"]
    assert len(requests) == len(set(requests))
    assert {r["method"] for r in requests.values()} <= {
        "elicitation/create",
        "sampling/createMessage",
        "roots/list",
    }


def test_M8_a_tool_reusing_a_key_in_one_call_is_refused(checked: CheckedClient) -> None:
    reply = checked.call(
        "tools/call",
        {"name": "ask_same_key_twice"},
        capabilities={"elicitation": {}, "extensions": {}},
    )
    # a task tool without the extension: -32021 before it runs; as a task it fails (K tests)
    assert reply.body["error"]["code"] == -32021


# ---------------------------------------------------------------- M9
@pytest.mark.parametrize(
    "tool,missing",
    [
        ("mrtr_confirm_then_apply", "elicitation"),
        ("mrtr_sample", "sampling"),
        ("mrtr_roots", "roots"),
    ],
)
def test_M9_never_an_input_request_the_request_did_not_declare(
    checked: CheckedClient, tool: str, missing: str
) -> None:
    caps = {k: v for k, v in TASK_CAPS.items() if k != missing}
    reply = checked.call("tools/call", {"name": tool}, capabilities=caps)
    assert error_of(reply, -32021)["data"]["requiredCapabilities"] == {missing: {}}


def test_M9_form_elicitation_only_when_form_mode_is_declared(checked: CheckedClient) -> None:
    url_only = checked.call(
        "tools/call", {"name": "mrtr_confirm_then_apply"}, capabilities={"elicitation": {"url": {}}}
    )
    error_of(url_only, -32021)
    for declared in ({}, {"form": {}}, {"form": {}, "url": {}}):
        reply = checked.call(
            "tools/call",
            {"name": "mrtr_confirm_then_apply"},
            capabilities={"elicitation": declared},
        )
        assert reply.result["resultType"] == "input_required", declared


def test_M9_capabilities_are_those_of_this_round(checked: CheckedClient) -> None:
    first = checked.call("tools/call", {"name": "mrtr_two_rounds_then_apply"}).result
    reply = retry(
        checked,
        "mrtr_two_rounds_then_apply",
        first,
        {"name": {"action": "accept", "content": {"name": "Ann"}}},
        capabilities={"sampling": {}},
    )  # the retry no longer declares elicitation
    error_of(reply, -32021)


# ---------------------------------------------------------------- M10 / M11 (more in test_mrtr)
def test_M10_request_state_is_opaque_and_sealed(checked: CheckedClient) -> None:
    first = checked.call(
        "tools/call", {"name": "mrtr_confirm_then_apply", "arguments": {"target": "billing-db"}}
    ).result
    state = first["requestState"]
    assert "billing" not in state and "alice" not in state  # encrypted, not just signed
    flipped = state[:40] + ("A" if state[40] != "A" else "B") + state[41:]
    reply = retry(
        checked, "mrtr_confirm_then_apply", {"requestState": flipped}, {"confirm": ACCEPT_OK}
    )
    error_of(reply, -32602)


def test_M11_a_replayed_retry_never_creates_a_second_task(checked: CheckedClient) -> None:
    first = checked.call("tools/call", {"name": "confirm_before_task"}).result
    assert first["resultType"] == "input_required" and not Task.objects.exists()
    created = [
        retry(checked, "confirm_before_task", first, {"go": ACCEPT_OK}).result for _ in range(3)
    ]
    assert {c["resultType"] for c in created} == {"task"}
    assert len({c["taskId"] for c in created}) == 1
    assert Task.objects.count() == 1
    answered = InputRequest.objects.get(task_id=created[0]["taskId"], key="go")
    assert answered.state == "answered" and answered.response == ACCEPT_OK


# ---------------------------------------------------------------- M12
def test_M12_nothing_is_stored_while_waiting_for_an_answer(checked: CheckedClient) -> None:
    for name in ("mrtr_confirm_then_apply", "confirm_before_task", "mrtr_sample"):
        assert checked.call("tools/call", {"name": name}).result["resultType"] == "input_required"
    # The client may never answer or retry: no task, input request or audit row is waiting.
    assert not Task.objects.exists()
    assert not InputRequest.objects.exists()
    assert not AuditEvent.objects.exists()


# ---------------------------------------------------------------- M13 / M14
def test_M13_a_form_asking_for_a_secret_is_never_sent(checked: CheckedClient) -> None:
    reply = checked.call("tools/call", {"name": "secret_question"})
    error = error_of(reply, -32603)
    assert "password" in error["message"] and "secret" in error["message"]
    assert "inputRequests" not in reply.body.get("result", {})


def test_M13_M14_published_questions_are_form_mode(checked: CheckedClient) -> None:
    for name in ("mrtr_confirm_then_apply", "mrtr_two_rounds_then_apply", "confirm_before_task"):
        for request in checked.call("tools/call", {"name": name}).result["inputRequests"].values():
            assert request["params"]["mode"] == "form"
            validate("ElicitRequestFormParams", request["params"])
            assert "url" not in request["params"]


# ---------------------------------------------------------------- M16
@pytest.mark.parametrize(
    "response,text",
    [
        ({"action": "decline"}, "not applied (decline)"),
        ({"action": "cancel"}, "not applied (cancel)"),
        ({"action": "accept", "content": {"ok": False}}, "not applied (declined in the form)"),
    ],
)
def test_M16_decline_and_cancel_are_handled(
    checked: CheckedClient, response: dict, text: str
) -> None:
    toolpack.PROTOCOL_PROBES.clear()
    first = checked.call("tools/call", {"name": "mrtr_confirm_then_apply"}).result
    result = retry(checked, "mrtr_confirm_then_apply", first, {"confirm": response}).result
    assert result["resultType"] == "complete"
    assert result["content"][0]["text"] == text
    assert toolpack.PROTOCOL_PROBES["apply"] == 0


@pytest.mark.parametrize(
    "response",
    [
        12345,
        "accept",
        None,
        [],
        {"action": "maybe"},
        {"action": "accept", "content": "yes"},
        {"action": "accept", "content": {"ok": "yes"}},
        {"action": "accept", "content": {}},
    ],
)
def test_M16_a_malformed_answer_is_refused_and_nothing_runs(
    checked: CheckedClient, response
) -> None:
    toolpack.PROTOCOL_PROBES.clear()
    first = checked.call("tools/call", {"name": "mrtr_confirm_then_apply"}).result
    reply = retry(checked, "mrtr_confirm_then_apply", first, {"confirm": response})
    error = error_of(reply, -32602)
    assert "confirm" in error["message"]
    assert toolpack.PROTOCOL_PROBES["apply"] == 0


def test_M16_sampling_and_roots_answers_are_validated(checked: CheckedClient) -> None:
    first = checked.call("tools/call", {"name": "mrtr_sample"}).result
    bad = retry(checked, "mrtr_sample", first, {"question": {"content": "no role"}})
    error_of(bad, -32602)
    good = retry(
        checked,
        "mrtr_sample",
        first,
        {"question": {"role": "assistant", "content": {"type": "text", "text": "4"}, "model": "m"}},
    ).result
    assert good["content"][0]["text"] == "4"
    first = checked.call("tools/call", {"name": "mrtr_roots"}).result
    error_of(retry(checked, "mrtr_roots", first, {"roots": {"roots": [{"name": "x"}]}}), -32602)
    ok = retry(checked, "mrtr_roots", first, {"roots": {"roots": [{"uri": "file:///a"}]}})
    assert ok.result["content"][0]["text"] == "file:///a"


# ---------------------------------------------------------------- M17
def test_M17_elicitation_state_is_bound_to_the_authenticated_user(checked_for) -> None:
    alice, adam, bob = checked_for("alice"), checked_for("adam"), checked_for("bob")
    first = alice.call("tools/call", {"name": "mrtr_confirm_then_apply"}).result
    for other in (adam, bob):
        reply = retry(other, "mrtr_confirm_then_apply", first, {"confirm": ACCEPT_OK})
        assert "another principal" in error_of(reply, -32602)["message"]
    # Identity comes from the token only: a clientInfo naming alice changes nothing.
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": TASK_CAPS,
        "io.modelcontextprotocol/clientInfo": {"name": "alice", "version": "1"},
    }
    reply = adam.call(
        "tools/call",
        {
            "name": "mrtr_confirm_then_apply",
            "_meta": meta,
            "inputResponses": {"confirm": ACCEPT_OK},
            "requestState": first["requestState"],
        },
    )
    error_of(reply, -32602)


# ---------------------------------------------------------------- M18
def test_M18_no_progress_notifications_on_request_responses(checked: CheckedClient) -> None:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": TASK_CAPS,
        "progressToken": "p-1",
    }
    reply = checked.call("tools/call", {"name": "inline_report", "_meta": meta})
    assert set(reply.body) == {"jsonrpc", "id", "result"}  # one response, no notifications
