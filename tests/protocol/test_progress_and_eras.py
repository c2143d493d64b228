"""Progress notifications of an inline tools/call, the answer to an earlier-era client, and the
methods of capabilities this server does not declare (issue 25)."""

from __future__ import annotations

import importlib
import json
from typing import Any

import pytest

from tests.protocol.conftest import VERSION, McpClient, Reply, validate

pytestmark = pytest.mark.django_db(transaction=True)

SSE = "text/event-stream"


def sse_messages(reply: Reply) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an SSE body, in order (one ``data:`` line each)."""
    assert reply.headers["content-type"].startswith(SSE), reply.headers
    assert isinstance(reply.body, str)
    return [
        json.loads(line.removeprefix("data: "))
        for line in reply.body.splitlines()
        if line.startswith("data: ")
    ]


def call_with_token(
    mcp: McpClient, tool: str, token: Any, *, accept: str | None = None, **arguments: Any
) -> Reply:
    params = {
        "name": tool,
        "arguments": arguments,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities": {},
            "progressToken": token,
        },
    }
    headers = {"accept": accept} if accept else None
    return mcp.call("tools/call", params, headers=headers)


# ---------------------------------------------------------------- progress
def test_inline_call_with_progress_token_streams_increasing_progress_then_the_result(mcp):
    reply = call_with_token(mcp, "counts_with_progress", "tok-1", steps=3)
    assert reply.status == 200
    assert reply.headers["x-request-id"]
    *notifications, response = sse_messages(reply)
    assert [n["method"] for n in notifications] == ["notifications/progress"] * 3
    assert [n["params"] for n in notifications] == [
        {"progressToken": "tok-1", "progress": n, "total": 3, "message": f"step {n} of 3"}
        for n in (1, 2, 3)
    ]  # the 4th report did not advance progress: nothing was sent for it
    for notification in notifications:
        validate("ProgressNotification", notification)
    assert response["id"] == mcp.next_id
    assert response["result"]["content"] == [{"type": "text", "text": "counted 3"}]
    validate("CallToolResult", response["result"])


def test_integer_progress_token_is_echoed_as_given(mcp):
    *notifications, _ = sse_messages(call_with_token(mcp, "counts_with_progress", 7, steps=1))
    assert [n["params"]["progressToken"] for n in notifications] == [7]


def test_without_a_progress_token_the_reply_is_plain_json(mcp):
    reply = mcp.tool("counts_with_progress", {"steps": 2}, capabilities={})
    assert reply.headers["content-type"] == "application/json"
    assert reply.result["content"] == [{"type": "text", "text": "counted 2"}]


def test_a_client_that_accepts_only_json_gets_no_progress_and_a_json_reply(mcp):
    reply = call_with_token(
        mcp, "counts_with_progress", "tok-2", accept="application/json", steps=2
    )
    assert reply.headers["content-type"] == "application/json"
    assert reply.result["content"] == [{"type": "text", "text": "counted 2"}]


def test_a_tool_that_never_reports_progress_answers_plain_json_despite_a_token(mcp):
    reply = call_with_token(mcp, "counts_with_progress", "tok-3", steps=0)
    assert reply.headers["content-type"] == "application/json"
    assert reply.result["content"] == [{"type": "text", "text": "counted 0"}]


@pytest.mark.parametrize("token", [True, 1.5, {"a": 1}, ["x"]])
def test_a_progress_token_that_is_not_a_string_or_integer_is_invalid_params(mcp, token):
    reply = call_with_token(mcp, "counts_with_progress", token)
    assert reply.status == 200
    assert reply.error["code"] == -32602
    assert "progressToken" in reply.error["message"]


def test_a_non_numeric_progress_is_a_misdefined_tool_error_inline(mcp):
    reply = call_with_token(mcp, "reports_bad_progress", "tok-4")
    assert reply.headers["content-type"] == "application/json"
    assert reply.error["code"] == -32603
    assert "progress" in reply.error["message"]


def test_a_non_numeric_progress_fails_a_task_as_misdefined(mcp, run_jobs):
    task_id = mcp.tool("reports_bad_progress").result["taskId"]
    run_jobs()
    got = mcp.call("tasks/get", {"taskId": task_id}).result
    assert got["status"] == "failed"
    assert "progress" in got["error"]["message"]


def test_a_task_gets_no_progress_notification_its_report_is_the_status_message(mcp, run_jobs):
    reply = mcp.call(
        "tools/call",
        {
            "name": "counts_with_progress",
            "arguments": {"steps": 100},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": VERSION,
                "io.modelcontextprotocol/clientCapabilities": {
                    "extensions": {"io.modelcontextprotocol/tasks": {}}
                },
                "progressToken": "tok-6",
            },
        },
    )
    assert reply.headers["content-type"] == "application/json"
    assert reply.result["resultType"] == "task"
    task_id = reply.result["taskId"]
    run_jobs()  # runs until the durable 60 s sleep
    got = mcp.call("tasks/get", {"taskId": task_id}).result
    assert got["status"] == "working"
    # Reports are coalesced (issue 22): the latest one before the durable sleep is the message.
    assert got["statusMessage"] == "resting"


# ---------------------------------------------------------------- earlier-era clients
# The exact request a 2025-11-25 client (the official TypeScript and Python SDKs) opens with: no
# Mcp-Method, no MCP-Protocol-Version (sent only after initialization), no _meta.
INITIALIZE_2025 = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {"elicitation": {}, "sampling": {}, "roots": {"listChanged": True}},
        "clientInfo": {"name": "claude-desktop", "version": "1.0.0"},
    },
}
HEADERS_2025 = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


def assert_version_mismatch(reply: Reply, request_id: Any, requested: str | None) -> None:
    """The 2025 specifications' version-mismatch error: -32602 "Unsupported protocol version"
    with data.supported (and data.requested), HTTP 400."""
    assert reply.status == 400
    assert reply.body["jsonrpc"] == "2.0" and reply.body["id"] == request_id
    error = reply.body["error"]
    assert error["code"] == -32602
    assert error["message"].startswith("Unsupported protocol version")
    assert VERSION in error["message"]
    expected: dict[str, Any] = {"supported": [VERSION]}
    if requested is not None:
        expected["requested"] = requested
    assert error["data"] == expected


def test_a_2025_11_25_initialize_is_told_the_supported_version(db):
    reply = McpClient(None).raw(json.dumps(INITIALIZE_2025), HEADERS_2025)
    assert_version_mismatch(reply, 0, "2025-11-25")


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18"])
def test_older_initialize_versions_get_the_same_answer(db, version):
    body = {**INITIALIZE_2025, "id": "init", "params": {"protocolVersion": version}}
    reply = McpClient(None).raw(json.dumps(body), HEADERS_2025)
    assert_version_mismatch(reply, "init", version)


def test_a_2025_session_request_names_its_header_version(db):
    body = {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}}
    headers = {**HEADERS_2025, "mcp-protocol-version": "2025-06-18", "mcp-session-id": "abc"}
    assert_version_mismatch(McpClient(None).raw(json.dumps(body), headers), 3, "2025-06-18")


def test_a_request_with_neither_era_marker_gets_the_supported_version(db):
    body = {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "x"}}
    assert_version_mismatch(McpClient(None).raw(json.dumps(body), HEADERS_2025), 4, None)


def test_a_2026_request_missing_only_meta_keeps_its_own_error(mcp):
    reply = mcp.call("server/discover", {"_meta": {}})
    assert reply.status == 400 and reply.error["code"] == -32602
    assert "protocolVersion" in reply.error["message"]
    assert "data" not in reply.error


def test_initialize_with_2026_markers_is_still_method_not_found(mcp):
    reply = mcp.call("initialize", {})
    assert reply.status == 404 and reply.error["code"] == -32601
    assert VERSION in reply.error["message"]


# ---------------------------------------------------------------- undeclared capabilities
@pytest.mark.parametrize(
    "method,params",
    [
        ("resources/list", {}),
        ("resources/templates/list", {}),
        ("resources/read", {"uri": "file:///x"}),
        ("resources/subscribe", {"uri": "file:///x"}),
        ("resources/unsubscribe", {"uri": "file:///x"}),
        ("prompts/list", {}),
        ("prompts/get", {"name": "x"}),
        ("completion/complete", {"ref": {"type": "ref/prompt", "name": "x"}}),
    ],
)
def test_undeclared_capability_methods_are_not_found_by_name(mcp, method, params):
    headers = {"mcp-name": params.get("uri") or params.get("name") or "x"}
    reply = mcp.call(method, params, headers=headers)
    assert reply.status == 404
    assert reply.error["code"] == -32601
    assert reply.error["message"] == f"Method not found: {method}"
    capabilities = mcp.call("server/discover").result["capabilities"]
    assert not {"resources", "prompts", "completions"} & set(capabilities)


# ---------------------------------------------------------------- the conformance fixture pack
def test_conformance_fixtures_are_not_served_outside_conformance_mode(mcp):
    names = {t["name"] for t in mcp.call("tools/list").result["tools"]}
    assert not names & {"test_tool_with_progress", "test_simple_text", "json_schema_2020_12_tool"}
    reply = call_with_token(mcp, "test_tool_with_progress", "tok-c")
    assert reply.error["code"] == -32602 and "Unknown tool" in reply.error["message"]


def test_the_progress_fixture_reports_0_50_100_in_conformance_mode(mcp, settings):
    importlib.import_module("mcptasks.tools.conformance_base")
    settings.MCPTASKS_CONFORMANCE_MODE = True
    *notifications, response = sse_messages(
        call_with_token(mcp, "test_tool_with_progress", "progress-test-1")
    )
    assert [(n["params"]["progress"], n["params"]["total"]) for n in notifications] == [
        (0, 100),
        (50, 100),
        (100, 100),
    ]
    assert response["result"]["content"][0]["type"] == "text"
