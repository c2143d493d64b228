"""PROTOCOL §6 group E (envelope, versioning, errors): one test per MUST that applies.

Every reply is validated by :func:`assert_wire` (schemas plus the checks they cannot express).
"""

from __future__ import annotations

import json
import socket

import pytest

from audit.models import AuditEvent
from mcptasks.models import Task
from tests import toolpack
from tests.protocol.conftest import (
    TASK_CAPS,
    TASKS,
    VERSION,
    CheckedClient,
    assert_error_response,
    request_body,
    validate,
)

pytestmark = pytest.mark.django_db(transaction=True)

META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPS = "io.modelcontextprotocol/clientCapabilities"


def error_of(reply, code: int) -> dict:
    error = assert_error_response(reply.status, reply.body)
    assert error["code"] == code, error
    return error


# ---------------------------------------------------------------- E1 / E2
def test_E1_server_discover_is_implemented(checked: CheckedClient) -> None:
    reply = checked.call("server/discover", capabilities={})
    assert reply.status == 200
    validate("DiscoverResultResponse", reply.body)


def test_E2_discover_result_fields(checked: CheckedClient) -> None:
    result = checked.call("server/discover").result
    assert result["resultType"] == "complete"
    assert result["supportedVersions"] == [VERSION]
    assert all(isinstance(v, str) for v in result["supportedVersions"])
    assert isinstance(result["capabilities"], dict) and "tools" in result["capabilities"]
    assert isinstance(result["ttlMs"], int) and result["ttlMs"] >= 0
    assert result["cacheScope"] in ("public", "private")
    assert "serverInfo" not in result  # moved into _meta in 2026-07-28
    assert "tasks" not in result["capabilities"]  # never the legacy capability
    validate("ServerCapabilities", result["capabilities"])


# ---------------------------------------------------------------- E3
@pytest.mark.parametrize(
    "meta",
    [
        None,  # no _meta at all
        "not an object",
        {META_CAPS: {}},  # no protocolVersion
        {META_VERSION: VERSION},  # no clientCapabilities
        {META_VERSION: "", META_CAPS: {}},
        {META_VERSION: VERSION, META_CAPS: None},
        {META_VERSION: VERSION, META_CAPS: ["sampling"]},
        {META_VERSION: 20260728, META_CAPS: {}},
    ],
)
@pytest.mark.parametrize("method", ["server/discover", "tools/list", "tools/call", "tasks/get"])
def test_E3_missing_meta_fields_are_400_invalid_params(
    checked: CheckedClient, meta, method: str
) -> None:
    params: dict = (
        {"name": "echo_task"}
        if method == "tools/call"
        else ({"taskId": "t"} if method == "tasks/get" else {})
    )
    if meta is not None:
        params["_meta"] = meta
    body = {"jsonrpc": "2.0", "id": 41, "method": method, "params": params}
    reply = checked.raw(json.dumps(body), checked.headers_for(method, params))
    assert reply.status == 400
    error = assert_error_response(reply.status, reply.body, 41)
    assert error["code"] == -32602


def test_E3_client_info_is_optional(checked: CheckedClient) -> None:
    meta = {META_VERSION: VERSION, META_CAPS: {}}
    assert checked.call("server/discover", {"_meta": meta}).status == 200


# ---------------------------------------------------------------- E4
def test_E4_capabilities_never_carry_over_from_earlier_requests(checked: CheckedClient) -> None:
    created = checked.call("tools/call", {"name": "echo_task"}).result
    assert created["resultType"] == "task"
    # The same client, next request, no extension declared: tasks/* is gated again.
    reply = checked.call("tasks/get", {"taskId": created["taskId"]}, capabilities={})
    error_of(reply, -32021)
    # ...and an auto tool runs inline instead of becoming a task.
    reply = checked.call("tools/call", {"name": "echo_auto"}, capabilities={})
    assert reply.result["resultType"] == "complete"


def test_E4_version_never_carries_over(checked: CheckedClient) -> None:
    assert checked.call("tools/list").status == 200
    reply = checked.call("tools/list", headers={"mcp-protocol-version": None})
    error_of(reply, -32020)


def test_E4_identity_never_carries_over(checked: CheckedClient) -> None:
    assert checked.call("tools/list").status == 200
    anonymous = CheckedClient(None)
    assert anonymous.call("tools/list").status == 401


# ---------------------------------------------------------------- E5
def test_E5_tool_requiring_a_capability_gets_32021_with_an_object(checked: CheckedClient) -> None:
    toolpack.PROTOCOL_PROBES.clear()
    reply = checked.call("tools/call", {"name": "needs_sampling"}, capabilities={"elicitation": {}})
    assert reply.status == 400
    error = error_of(reply, -32021)
    assert error["data"] == {"requiredCapabilities": {"sampling": {}}}
    assert toolpack.PROTOCOL_PROBES["needs_sampling.runs"] == 0
    ok = checked.call("tools/call", {"name": "needs_sampling"}, capabilities={"sampling": {}})
    assert ok.result["content"][0]["text"] == "ran"


@pytest.mark.parametrize(
    "tool,capability",
    [
        ("mrtr_confirm_then_apply", "elicitation"),
        ("mrtr_sample", "sampling"),
        ("mrtr_roots", "roots"),
    ],
)
def test_E5_input_request_needing_an_undeclared_capability_is_32021(
    checked: CheckedClient, tool: str, capability: str
) -> None:
    caps = {k: v for k, v in TASK_CAPS.items() if k not in (capability, "extensions")}
    reply = checked.call("tools/call", {"name": tool}, capabilities=caps)
    assert reply.status == 400
    assert error_of(reply, -32021)["data"]["requiredCapabilities"] == {capability: {}}


def test_E5_task_only_tool_without_the_extension_is_32021(checked: CheckedClient) -> None:
    reply = checked.call("tools/call", {"name": "echo_task"}, capabilities={"elicitation": {}})
    assert reply.status == 400
    assert error_of(reply, -32021)["data"]["requiredCapabilities"] == {"extensions": {TASKS: {}}}
    assert not Task.objects.exists()


# ---------------------------------------------------------------- E6 / E7
def test_E6_every_result_carries_result_type(checked: CheckedClient, run_jobs) -> None:
    created = checked.call("tools/call", {"name": "echo_task"}).result
    run_jobs()
    replies = [
        checked.call("server/discover"),
        checked.call("tools/list"),
        checked.call("tools/call", {"name": "inline_tool_error"}),
        checked.call("tools/call", {"name": "mrtr_confirm_then_apply"}),
        checked.call("tasks/get", {"taskId": created["taskId"]}),
        checked.call("tasks/cancel", {"taskId": created["taskId"]}),
    ]
    for reply in replies:
        assert isinstance(reply.result["resultType"], str)  # assert_wire checked the value


def test_E7_task_result_type_only_when_the_extension_is_declared(checked: CheckedClient) -> None:
    declared = checked.call("tools/call", {"name": "echo_auto"})
    assert declared.result["resultType"] == "task"
    legacy = checked.call(
        "tools/call",
        {"name": "echo_auto"},
        capabilities={"tasks": {"requests": {"tools": {"call": {}}}}},
    )
    assert legacy.result["resultType"] == "complete"  # legacy declaration does not count
    other = checked.call(
        "tools/call", {"name": "echo_auto"}, capabilities={"extensions": {"io.example/other": {}}}
    )
    assert other.result["resultType"] == "complete"


# ---------------------------------------------------------------- E8 / E9
def test_E8_only_defined_codes_in_the_reserved_range(checked: CheckedClient) -> None:
    probes = [
        checked.call("tools/call", {"name": "no_such_tool"}, headers={"mcp-name": "no_such_tool"}),
        checked.call("tasks/get", {"taskId": "no-such-task"}),
        checked.call("tasks/update", {"taskId": "no-such-task", "inputResponses": {}}),
        checked.call("tasks/cancel", {"taskId": "no-such-task"}),
        checked.call("tools/list", {"cursor": "bogus"}),
        checked.call("tools/call", {"name": "inline_boom"}),
        checked.call(
            "resources/read", {"uri": "file:///missing"}, headers={"mcp-name": "file:///missing"}
        ),
    ]
    codes = [p.body["error"]["code"] for p in probes]
    assert codes == [-32602, -32602, -32602, -32602, -32602, -32603, -32601]
    assert not {-32002, -32042} & set(codes)


@pytest.mark.parametrize("request_id", [0, 7, -3, 2**53, "abc", "", "ünï"])
def test_E9_errors_echo_the_request_id(checked: CheckedClient, request_id) -> None:
    reply = checked.call("tools/list", headers={"mcp-method": "tools/call"}, request_id=request_id)
    assert reply.body["id"] == request_id
    reply = checked.call("unknown/method", request_id=request_id)
    assert reply.body["id"] == request_id and reply.status == 404


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"\xff\xfe",
        b"[]",
        b'{"jsonrpc":"2.0","id":null,"method":"tools/list"}',
        b'{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}',
        b'{"jsonrpc":"2.0","id":true,"method":"tools/list"}',
        b'{"jsonrpc":"2.0","id":{},"method":"tools/list"}',
    ],
)
def test_E9_unreadable_ids_are_omitted(checked: CheckedClient, body: bytes) -> None:
    reply = checked.raw(body, checked.headers_for("tools/list", {}))
    assert reply.status == 400
    error = assert_error_response(reply.status, reply.body)
    assert error["code"] in (-32700, -32600)
    assert "id" not in reply.body


# ---------------------------------------------------------------- E10
def test_E10_no_log_message_without_log_level(checked: CheckedClient) -> None:
    reply = checked.call("tools/call", {"name": "inline_report"})
    assert reply.result["content"][0]["text"] == "reported"
    # One JSON object, the response itself: no notifications/message (nor anything else).
    assert set(reply.body) == {"jsonrpc", "id", "result"}


# ---------------------------------------------------------------- E11 / E12
def test_E11_cacheable_results_carry_ttl_and_scope(checked: CheckedClient) -> None:
    for method in ("server/discover", "tools/list"):
        result = checked.call(method).result
        assert isinstance(result["ttlMs"], int) and result["ttlMs"] >= 0
        assert result["cacheScope"] in ("public", "private")
    # input_required results carry no cache hints
    pending = checked.call("tools/call", {"name": "mrtr_confirm_then_apply"}).result
    assert "ttlMs" not in pending and "cacheScope" not in pending


def test_E12_every_page_of_tools_list_has_the_same_cache_scope(checked: CheckedClient) -> None:
    first = checked.call("tools/list").result
    assert "nextCursor" not in first  # one page holds every tool
    scopes = {checked.call("tools/list").result["cacheScope"] for _ in range(3)}
    assert scopes == {first["cacheScope"]}
    error_of(checked.call("tools/list", {"cursor": "page-2"}), -32602)


# ---------------------------------------------------------------- E13
def test_E13_access_control_does_not_rely_on_cache_scope(checked_for, run_jobs) -> None:
    alice, bob, adam = checked_for("alice"), checked_for("bob"), checked_for("adam")
    task_id = alice.call("tools/call", {"name": "echo_task"}).result["taskId"]
    run_jobs()
    assert alice.call("tasks/get", {"taskId": task_id}).result["status"] == "completed"
    for other in (bob, adam):  # another tenant, and another member of the same tenant
        for method, extra in [
            ("tasks/get", {}),
            ("tasks/cancel", {}),
            ("tasks/update", {"inputResponses": {}}),
        ]:
            reply = other.call(method, {"taskId": task_id, **extra})
            error = error_of(reply, -32602)
            unknown = other.call(method, {"taskId": "x" * len(task_id), **extra})
            assert error["message"] == unknown.body["error"]["message"]


# ---------------------------------------------------------------- E14
def test_E14_tools_list_never_varies_by_connection_or_side_effect(checked_for, run_jobs) -> None:
    alice, bob = checked_for("alice"), checked_for("bob")
    before = alice.call("tools/list").result
    alice.call("tools/call", {"name": "echo_task"})
    alice.call("tools/call", {"name": "mrtr_confirm_then_apply"})
    run_jobs()
    after = alice.call("tools/list").result
    from_bob = bob.call("tools/list").result
    assert before["tools"] == after["tools"] == from_bob["tools"]


# ---------------------------------------------------------------- E15
def test_E15_mrtr_state_travels_only_in_request_state(checked: CheckedClient) -> None:
    first = checked.call("tools/call", {"name": "mrtr_two_rounds_then_apply"}).result
    second = checked.call(
        "tools/call",
        {
            "name": "mrtr_two_rounds_then_apply",
            "inputResponses": {"name": {"action": "accept", "content": {"name": "Ann"}}},
            "requestState": first["requestState"],
        },
    ).result
    assert list(second["inputRequests"]) == ["confirm"]
    # The server kept nothing: the same answer without the requestState starts from the top.
    again = checked.call(
        "tools/call",
        {
            "name": "mrtr_two_rounds_then_apply",
            "inputResponses": {"confirm": {"action": "accept", "content": {"ok": True}}},
        },
    ).result
    assert again["resultType"] == "input_required"
    assert list(again["inputRequests"]) == ["name"]


# ---------------------------------------------------------------- E16
def test_E16_network_refs_are_never_dereferenced(checked: CheckedClient, monkeypatch) -> None:
    attempts: list = []

    def refuse(self, address):  # any outbound connection attempt fails the test
        attempts.append(address)
        raise AssertionError(f"network access to {address}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    toolpack.PROTOCOL_PROBES.clear()
    reply = checked.call("tools/call", {"name": "remote_ref", "arguments": {"spec": {"a": 1}}})
    assert attempts == []
    assert reply.status != 500
    assert "error" in reply.body or reply.result.get("isError")
    assert toolpack.PROTOCOL_PROBES["remote_ref.runs"] == 0


# ---------------------------------------------------------------- E17
def test_E17_notifications_are_never_answered(checked: CheckedClient) -> None:
    for method in ("notifications/initialized", "notifications/cancelled", "notifications/unknown"):
        body = {"jsonrpc": "2.0", "method": method, "params": request_body(method)["params"]}
        reply = checked.raw(json.dumps(body), checked.headers_for(method, {}))
        assert reply.status == 202 and reply.body is None
    assert not AuditEvent.objects.exists()
