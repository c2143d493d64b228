"""PROTOCOL §6 group T (transport / HTTP): one test per MUST that applies, named by its id.

Every reply is validated by :func:`assert_wire` (schemas plus the checks they cannot express).
"""

from __future__ import annotations

import base64
import json

import pytest

from tests.protocol.conftest import (
    TASK_CAPS,
    VERSION,
    CheckedClient,
    asgi_request,
    assert_error_response,
    assert_wire,
    mcp_headers,
    request_body,
)

pytestmark = pytest.mark.django_db(transaction=True)


def b64(value: str) -> str:
    return "=?base64?" + base64.b64encode(value.encode()).decode() + "?="


def header_error(reply, code: int = -32020) -> dict:
    """The reply is a JSON-RPC error with ``code`` (HTTP status checked by the code)."""
    error = assert_error_response(reply.status, reply.body)
    assert error["code"] == code, error
    return error


# ---------------------------------------------------------------- T1
def test_T1_single_endpoint_accepts_post(checked: CheckedClient, cast) -> None:
    assert checked.call("server/discover").status == 200
    assert checked.call("tools/list").status == 200
    # /mcp is the one endpoint (no trailing slash, no sub-paths): elsewhere is not MCP.
    body = json.dumps(request_body("tools/list")).encode()
    for path in ("/mcp/", "/mcp/tools", "/api/mcp"):
        exchange = asgi_request(
            mcp_headers("tools/list", token=cast["alice"]["token"]), body, path=path
        )
        # Django answers (404, or a redirect to https in production): never JSON-RPC
        assert exchange.status != 200, (path, exchange.status)
        raw = b"".join(
            m.get("body", b"") for m in exchange.messages if m["type"] == "http.response.body"
        )
        assert b"jsonrpc" not in raw, (path, raw[:200])


def test_T1_get_and_delete_are_405_with_allow_post(checked: CheckedClient) -> None:
    for verb in ("GET", "DELETE", "PUT"):
        reply = checked.raw(b"", checked.headers_for("tools/list", {}), method=verb)
        assert reply.status == 405, (verb, reply.status)
        assert reply.headers["allow"] == "POST"


# ---------------------------------------------------------------- T2
@pytest.mark.parametrize(
    "origin",
    [
        "http://evil.example.com",
        "https://127.0.0.1.evil.example",
        "null",
        "http://localhost.evil.example:8000",
    ],
)
def test_T2_invalid_origin_is_403(checked: CheckedClient, origin: str) -> None:
    reply = checked.call("tools/list", headers={"origin": origin}, check=False)
    assert reply.status == 403, reply.body
    assert "result" not in (reply.body or {})


@pytest.mark.parametrize(
    "origin",
    ["http://localhost:3000", "http://127.0.0.1:8000", "http://[::1]:9000", "https://localhost"],
)
def test_T2_local_origin_is_accepted(checked: CheckedClient, origin: str) -> None:
    assert checked.call("tools/list", headers={"origin": origin}).status == 200


def test_T2_foreign_host_is_rejected_before_anything_else(checked: CheckedClient) -> None:
    headers = {**checked.headers_for("tools/list", {}), "host": "evil.example.com"}
    reply = checked.raw(json.dumps(request_body("tools/list")), headers)
    assert 400 <= reply.status < 500


# ---------------------------------------------------------------- T3 / E17
def test_T3_accepted_notification_is_202_with_empty_body(checked: CheckedClient) -> None:
    body = {
        "jsonrpc": "2.0",
        "method": "notifications/initialized",
        "params": request_body("x")["params"],
    }
    headers = checked.headers_for("notifications/initialized", {})
    reply = checked.raw(json.dumps(body), headers)
    assert reply.status == 202
    assert reply.body is None  # empty body: notifications are never answered


def test_T3_rejected_notification_is_4xx(checked: CheckedClient) -> None:
    headers = checked.headers_for("notifications/initialized", {})
    bad_params = {"jsonrpc": "2.0", "method": "notifications/initialized", "params": [1]}
    reply = checked.raw(json.dumps(bad_params), headers)
    assert 400 <= reply.status < 500
    error = assert_error_response(reply.status, reply.body)
    assert error["code"] == -32600 and "id" not in reply.body
    unauthenticated = {**headers}
    unauthenticated.pop("authorization")
    body = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert checked.raw(json.dumps(body), unauthenticated).status == 401


# ---------------------------------------------------------------- T4
def test_T4_request_response_is_one_application_json_object(checked: CheckedClient) -> None:
    for method, params in [
        ("server/discover", {}),
        ("tools/list", {}),
        ("tools/call", {"name": "mrtr_confirm_then_apply"}),
        ("tools/call", {"name": "echo_task"}),
    ]:
        reply = checked.call(method, params)  # assert_wire checks the content type and shape
        assert reply.headers["content-type"] == "application/json"
        assert isinstance(reply.body, dict)


# ---------------------------------------------------------------- T5 / T6 / T20
def test_T5_T20_request_responses_are_never_streams(checked: CheckedClient) -> None:
    """Request responses are plain JSON, so no notification and nothing after an
    InputRequiredResult can follow on them (the SSE stream is only subscriptions/listen)."""
    headers = {"accept": "text/event-stream, application/json"}
    reply = checked.call("tools/call", {"name": "mrtr_confirm_then_apply"}, headers=headers)
    assert reply.result["resultType"] == "input_required"
    assert reply.headers["content-type"] == "application/json"
    assert "\n" not in json.dumps(reply.body)


def test_T6_server_needs_arrive_as_mrtr_results_never_requests(checked: CheckedClient) -> None:
    for name in ("mrtr_confirm_then_apply", "mrtr_sample", "mrtr_roots"):
        reply = checked.call("tools/call", {"name": name})
        assert reply.result["resultType"] == "input_required"
        assert "method" not in reply.body and "id" in reply.body


# ---------------------------------------------------------------- T7
def test_T7_disconnect_before_the_request_is_read_sends_nothing(cast) -> None:
    exchange = asgi_request(
        mcp_headers("tools/list", token=cast["alice"]["token"]),
        [
            {"type": "http.request", "body": b'{"jsonrpc":', "more_body": True},
            {"type": "http.disconnect"},
        ],
    )
    assert exchange.messages == []


# ---------------------------------------------------------------- T8 .. T10
def test_T8_missing_protocol_version_header_is_32020(checked: CheckedClient) -> None:
    reply = checked.call("tools/list", headers={"mcp-protocol-version": None})
    assert reply.status == 400
    header_error(reply)


def test_T9_protocol_version_header_differs_from_meta_is_32020(checked: CheckedClient) -> None:
    reply = checked.call("server/discover", headers={"mcp-protocol-version": "2025-11-25"})
    assert reply.status == 400
    header_error(reply)
    meta = {
        "io.modelcontextprotocol/protocolVersion": "v999.0.0",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    reply = checked.call("server/discover", {"_meta": meta})  # header still says 2026-07-28
    assert reply.status == 400
    header_error(reply)


@pytest.mark.parametrize("version", ["v999.0.0", "2025-11-25", "1900-01-01", "2026-07-28 "])
def test_T10_unsupported_version_is_32022_with_supported_and_requested(
    checked: CheckedClient, version: str
) -> None:
    meta = {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    reply = checked.call(
        "server/discover",
        {"_meta": meta},
        headers={
            "mcp-protocol-version": version.strip() if version.strip() != version else version
        },
    )
    if version != version.strip():  # trimmed header no longer equals _meta: a mismatch first
        header_error(reply)
        return
    assert reply.status == 400
    error = header_error(reply, -32022)
    assert error["data"] == {"supported": [VERSION], "requested": version}


# ---------------------------------------------------------------- T11
@pytest.mark.parametrize(
    "method",
    [
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/list",
        "resources/read",
        "prompts/list",
        "prompts/get",
        "resources/subscribe",
        "completion/complete",
        "tasks/result",
        "tasks/list",
        "unknown/method",
        "notifications/initialized",
    ],
)
def test_T11_unimplemented_method_is_404_32601(checked: CheckedClient, method: str) -> None:
    params = (
        {"name": "x"}
        if method == "prompts/get"
        else ({"uri": "file:///x"} if method == "resources/read" else {})
    )
    headers = {"mcp-name": "file:///x" if method == "resources/read" else "x"}
    reply = checked.call(method, params, headers=headers)
    assert reply.status == 404
    header_error(reply, -32601)


# ---------------------------------------------------------------- T12
@pytest.mark.parametrize(
    "value",
    [
        None,
        "tools/call",
        "TOOLS/LIST",
        "Tools/List",
        "tools/list/",
        "tools%2Flist",
        b64("tools/call"),
        "=?BASE64?dG9vbHMvbGlzdA==?=",
    ],
)
def test_T12_mcp_method_missing_or_mismatched_is_header_mismatch(
    checked: CheckedClient, value: str | None
) -> None:
    reply = checked.call("tools/list", headers={"mcp-method": value})
    assert reply.status == 400
    header_error(reply)


def test_T12_mcp_method_mismatch_is_header_mismatch_before_meta_and_auth(cast) -> None:
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}}
    client = CheckedClient(None)
    reply = client.raw(
        json.dumps(body),
        {
            "content-type": "application/json",
            "mcp-method": "tools/call",
            "mcp-protocol-version": VERSION,
        },
    )
    assert reply.status == 400
    assert header_error(reply)["code"] == -32020 and reply.body["id"] == 7


# ---------------------------------------------------------------- T13
@pytest.mark.parametrize("name", [None, "other_tool", "ECHO_TASK", "echo_task_", ""])
def test_T13_tools_call_mcp_name_missing_or_mismatched_is_header_mismatch(
    checked: CheckedClient, name: str | None
) -> None:
    reply = checked.call(
        "tools/call", {"name": "echo_task", "arguments": {}}, headers={"mcp-name": name}
    )
    assert reply.status == 400
    header_error(reply)


@pytest.mark.parametrize(
    "method,params", [("prompts/get", {"name": "p"}), ("resources/read", {"uri": "file:///a"})]
)
def test_T13_prompts_get_and_resources_read_need_mcp_name(
    checked: CheckedClient, method: str, params: dict
) -> None:
    reply = checked.call(method, params, headers={"mcp-name": None})
    assert reply.status == 400
    header_error(reply)
    wrong = checked.call(method, params, headers={"mcp-name": "something-else"})
    header_error(wrong)


# ---------------------------------------------------------------- T14
def test_T14_base64_sentinel_is_decoded_before_comparing(checked: CheckedClient) -> None:
    reply = checked.call(
        "tools/call",
        {"name": "echo_task", "arguments": {}},
        headers={"mcp-name": b64("echo_task"), "mcp-method": b64("tools/call")},
    )
    assert reply.result["resultType"] == "task"
    text = "Grüße, 東京 "
    reply = checked.call(
        "tools/call",
        {"name": "routed", "arguments": {"region": text}},
        headers={"mcp-param-region": b64(text)},
    )
    assert reply.result["content"][0]["text"].startswith(f"region={text} ")


@pytest.mark.parametrize(
    "value",
    [
        "=?base64?not base64!?=",
        "=?base64?ZWNob190YXNr?",
        "=?base64?ZWNob190YXNr=?=",
        "=?base64?/w==?=",
    ],
)
def test_T14_invalid_base64_is_header_mismatch(checked: CheckedClient, value: str) -> None:
    reply = checked.call(
        "tools/call", {"name": "echo_task", "arguments": {}}, headers={"mcp-name": value}
    )
    assert reply.status == 400
    header_error(reply)


@pytest.mark.parametrize(
    "literal",
    [
        "=?BASE64?ZWNob190YXNr?=",
        "=?Base64?ZWNob190YXNr?=",
        "=?base64?ZWNob190YXNr?=x",
        " =?b64?ZWNob190YXNr?=",
    ],
)
def test_T14_sentinel_without_exact_prefix_and_suffix_is_a_literal(
    checked: CheckedClient, literal: str
) -> None:
    # As literals these are not "echo_task": a mismatch. Proven literal by the next case.
    header_error(
        checked.call(
            "tools/call", {"name": "echo_task", "arguments": {}}, headers={"mcp-name": literal}
        )
    )


def test_T14_literal_lookalike_matches_a_body_with_the_same_literal(checked: CheckedClient) -> None:
    literal = "=?BASE64?abc?="
    reply = checked.call(
        "tools/call",
        {"name": "routed", "arguments": {"region": literal}},
        headers={"mcp-param-region": literal},
    )
    # the literal differs from the body as soon as it is read as base64, so it was a literal
    assert reply.result["content"][0]["text"].startswith(f"region={literal} ")


# ---------------------------------------------------------------- T15
@pytest.mark.parametrize("casing", [str.lower, str.upper, str.title])
def test_T15_header_names_match_case_insensitively(cast, casing) -> None:
    body = request_body("tools/call", {"name": "echo_task", "arguments": {}})
    headers = [
        (casing(k.decode()).encode(), v)
        for k, v in mcp_headers("tools/call", "echo_task", cast["alice"]["token"])
    ]
    exchange = asgi_request(headers, json.dumps(body).encode())
    assert exchange.status == 200, exchange.body
    assert exchange.body["result"]["resultType"] == "task"


def test_T15_surrounding_whitespace_is_trimmed(checked: CheckedClient) -> None:
    reply = checked.call(
        "tools/call",
        {"name": "echo_task", "arguments": {}},
        headers={"mcp-name": "  echo_task\t", "mcp-method": " tools/call "},
    )
    assert reply.result["resultType"] == "task"


# ---------------------------------------------------------------- T16
@pytest.mark.parametrize("header", [b"mcp-method", b"mcp-name", b"mcp-protocol-version"])
@pytest.mark.parametrize(
    "bad", [b"echo\x00task", b"echo\x7ftask", b"\xe9cho_task", b"echo\x1btask"]
)
def test_T16_invalid_characters_in_a_header_value_are_header_mismatch(
    cast, header: bytes, bad: bytes
) -> None:
    body = request_body("tools/call", {"name": "echo_task", "arguments": {}}, request_id=5)
    headers = [
        (k, bad if k == header else v)
        for k, v in mcp_headers("tools/call", "echo_task", cast["alice"]["token"])
    ]
    exchange = asgi_request(headers, json.dumps(body).encode())
    assert exchange.status == 400
    error = assert_error_response(exchange.status, exchange.body, 5)
    assert error["code"] == -32020


# ---------------------------------------------------------------- T17 / T18
def test_T17_param_header_missing_is_header_mismatch(checked: CheckedClient) -> None:
    for arguments in ({"region": "eu-west-1"}, {"count": 3}, {"dry_run": False}):
        reply = checked.call("tools/call", {"name": "routed", "arguments": arguments})
        assert reply.status == 400, arguments
        header_error(reply)


@pytest.mark.parametrize(
    "arguments,headers",
    [
        ({"region": "eu-west-1"}, {"mcp-param-region": "us-east-1"}),
        ({"region": "eu-west-1"}, {"mcp-param-region": "EU-WEST-1"}),
        ({"count": 3}, {"mcp-param-count": "4"}),
        ({"count": 3}, {"mcp-param-count": "three"}),
        ({"dry_run": True}, {"mcp-param-dry-run": "True"}),
        ({"dry_run": True}, {"mcp-param-dry-run": "1"}),
    ],
)
def test_T17_param_header_mismatch_is_header_mismatch(
    checked: CheckedClient, arguments: dict, headers: dict
) -> None:
    reply = checked.call("tools/call", {"name": "routed", "arguments": arguments}, headers=headers)
    assert reply.status == 400
    header_error(reply)


def test_T17_matching_param_headers_are_accepted(checked: CheckedClient) -> None:
    reply = checked.call(
        "tools/call",
        {"name": "routed", "arguments": {"region": "eu-west-1", "count": 42, "dry_run": True}},
        headers={
            "mcp-param-region": "eu-west-1",
            "MCP-PARAM-COUNT": "42.0",
            "Mcp-Param-Dry-Run": "true",
        },
    )
    assert reply.result["content"][0]["text"] == "region=eu-west-1 count=42 dry_run=True note="


def test_T18_null_or_absent_argument_needs_no_param_header(checked: CheckedClient) -> None:
    for arguments in ({}, {"region": None, "count": None, "dry_run": None}, {"note": "n"}):
        reply = checked.call("tools/call", {"name": "routed", "arguments": arguments})
        assert reply.result["resultType"] == "complete", arguments


# ---------------------------------------------------------------- T19
TCHAR = set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _x_mcp_headers(schema, path=(), reachable=True):
    """Yield (path, property schema, statically reachable) for every x-mcp-header."""
    if isinstance(schema, dict):
        if "x-mcp-header" in schema:
            yield path, schema, reachable
        for key, value in schema.items():
            if key == "properties" and isinstance(value, dict):
                for name, prop in value.items():
                    yield from _x_mcp_headers(prop, (*path, name), reachable)
            elif key != "x-mcp-header":
                yield from _x_mcp_headers(value, (*path, key), False)
    elif isinstance(schema, list):
        for index, item in enumerate(schema):
            yield from _x_mcp_headers(item, (*path, index), False)


def test_T19_published_x_mcp_header_annotations_follow_the_rules(checked: CheckedClient) -> None:
    tools = checked.call("tools/list").result["tools"]
    seen_any = False
    for tool in tools:
        names: set[str] = set()
        for path, prop, reachable in _x_mcp_headers(tool["inputSchema"]):
            seen_any = True
            name = prop["x-mcp-header"]
            where = f"{tool['name']}:{'/'.join(map(str, path))}"
            assert isinstance(name, str) and name and set(name) <= TCHAR, where
            assert name.lower() not in names, where
            names.add(name.lower())
            assert prop.get("type") in ("string", "integer", "boolean"), where
            assert reachable, where
            if prop.get("type") == "integer":
                for bound in ("minimum", "maximum"):
                    if bound in prop:
                        assert abs(prop[bound]) <= 2**53 - 1, where
    assert seen_any  # the routed test tool publishes some


def test_T1_T4_a_well_formed_request_passes_every_wire_check(checked: CheckedClient) -> None:
    reply = checked.call("tools/call", {"name": "echo_task", "arguments": {"text": "ok"}})
    assert_wire(reply, method="tools/call", request_id=reply.body["id"], capabilities=TASK_CAPS)
