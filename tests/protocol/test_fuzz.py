"""Fuzzing /mcp (hypothesis): envelopes, headers and params — wrong types, missing and extra
fields, huge strings, 5,000-deep nesting, bad UTF-8, out-of-range numbers.

For every input: never a 500, never an exception escaping the ASGI application, every JSON body
a well-formed JSON-RPC response, and a rejected request leaves no Task row and no AuditEvent.
A few hundred examples in all, so the suite stays fast.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit.models import AuditEvent
from mcptasks import embedded
from mcptasks.models import InputRequest, Task
from tests.protocol.conftest import (
    TASK_CAPS,
    VERSION,
    AsgiExchange,
    asgi_request,
    assert_error_response,
    validate,
)

pytestmark = pytest.mark.django_db(transaction=True)

FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)

METHODS = [
    "server/discover",
    "tools/list",
    "tools/call",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "subscriptions/listen",
    "initialize",
    "prompts/get",
    "x/y",
]
TOOLS = [
    "echo_task",
    "echo_auto",
    "mrtr_confirm_then_apply",
    "mrtr_two_rounds_then_apply",
    "mrtr_sample",
    "mrtr_roots",
    "routed",
    "structured_total",
    "needs_sampling",
    "confirm_before_task",
    "inline_tool_error",
    "ask_twice",
    "no_such_tool",
]
NAME_FIELD = {
    "tools/call": "name",
    "prompts/get": "name",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)
header_text = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x2FF), max_size=40)


def meta(capabilities: Any = None) -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": TASK_CAPS
        if capabilities is None
        else capabilities,
    }


def headers_for(
    token: str | None, method: Any, params: Any, overrides: dict[bytes, bytes | None] | None = None
) -> list[tuple[bytes, bytes]]:
    headers: dict[bytes, bytes] = {
        b"host": b"127.0.0.1:8000",
        b"content-type": b"application/json",
        b"accept": b"application/json, text/event-stream",
        b"mcp-protocol-version": VERSION.encode(),
    }
    if isinstance(method, str):
        headers[b"mcp-method"] = method.encode("utf-8", "replace")
        field = NAME_FIELD.get(method)
        if field and isinstance(params, dict) and isinstance(params.get(field), str | int):
            headers[b"mcp-name"] = str(params[field]).encode("utf-8", "replace")
    if token:
        headers[b"authorization"] = f"Bearer {token}".encode()
    for key, value in (overrides or {}).items():
        if value is None:
            headers.pop(key, None)
        else:
            headers[key] = value
    return list(headers.items())


def send(headers: list[tuple[bytes, bytes]], body: bytes) -> AsgiExchange:
    # The body, then a disconnect (which ends a subscriptions/listen stream).
    return asgi_request(
        headers,
        [{"type": "http.request", "body": body, "more_body": False}, {"type": "http.disconnect"}],
    )


def check(exchange: AsgiExchange, *, before: tuple[int, int, int]) -> None:
    """The invariants every fuzzed request must keep."""
    status = exchange.status
    assert status is not None and status != 500 and status < 500, exchange.messages
    starts = [m for m in exchange.messages if m["type"] == "http.response.start"]
    assert len(starts) == 1, exchange.messages
    content_type = dict(starts[0]["headers"]).get(b"content-type", b"")
    if content_type == b"text/event-stream":
        return  # an accepted subscriptions/listen stream (checked in tests/streams)
    body = exchange.body
    rejected = status >= 400 or (isinstance(body, dict) and "error" in body)
    if isinstance(body, dict) and body.get("jsonrpc") == "2.0":
        if "error" in body:
            error = assert_error_response(status, body)
            # the generic message is what an exception nobody handled becomes: a bug
            assert error["message"] != "Internal error", "unhandled exception"
        else:
            validate("JSONRPCResultResponse", body)
    elif status not in (202,):
        assert status >= 400 and isinstance(body, dict), (status, body)
    if rejected:
        assert counts() == before, "a rejected request stored rows"


def counts() -> tuple[int, int, int]:
    return Task.objects.count(), AuditEvent.objects.count(), InputRequest.objects.count()


@pytest.fixture
def token(cast) -> str:
    embedded.clear()
    yield cast["alice"]["token"]
    embedded.clear()


# ---------------------------------------------------------------- envelopes
@FUZZ
@given(
    envelope=st.dictionaries(
        st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error", "extra"]),
        json_values | st.sampled_from(["2.0", *METHODS]),
        max_size=6,
    )
)
def test_fuzz_envelope_fields(token: str, envelope: dict) -> None:
    before = counts()
    check(
        send(
            headers_for(token, envelope.get("method"), envelope.get("params")),
            json.dumps(envelope).encode(),
        ),
        before=before,
    )


@FUZZ
@given(body=json_values)
def test_fuzz_any_json_body(token: str, body: Any) -> None:
    before = counts()
    check(send(headers_for(token, "tools/list", {}), json.dumps(body).encode()), before=before)


@FUZZ
@given(
    raw=st.binary(max_size=200)
    | st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass"))
)
def test_fuzz_bad_bytes_and_bad_utf8(token: str, raw: bytes) -> None:
    before = counts()
    check(send(headers_for(token, "tools/list", {}), raw), before=before)
    # invalid UTF-8 inside an otherwise valid request
    valid = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta(), "x": "__"}}
    ).encode()
    check(
        send(headers_for(token, "tools/list", {}), valid.replace(b"__", raw[:20] + b"\xff\xc3(")),
        before=before,
    )


# ---------------------------------------------------------------- params
@FUZZ
@given(
    method=st.sampled_from(METHODS),
    name=st.sampled_from(TOOLS) | st.text(max_size=20),
    params=st.dictionaries(
        st.sampled_from(
            [
                "name",
                "arguments",
                "taskId",
                "inputResponses",
                "requestState",
                "cursor",
                "task",
                "notifications",
                "uri",
                "extra",
            ]
        ),
        json_values,
        max_size=5,
    ),
    capabilities=st.sampled_from([None, {}, {"extensions": {}}]) | json_values,
    drop_meta_key=st.sampled_from(
        [
            None,
            "io.modelcontextprotocol/protocolVersion",
            "io.modelcontextprotocol/clientCapabilities",
        ]
    ),
)
def test_fuzz_params(
    token: str, method: str, name: str, params: dict, capabilities: Any, drop_meta_key: str | None
) -> None:
    params = {"name": name, **params} if method == "tools/call" else params
    params["_meta"] = meta(capabilities)
    if drop_meta_key:
        params["_meta"].pop(drop_meta_key)
    before = counts()
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    check(send(headers_for(token, method, params), body.encode()), before=before)


@FUZZ
@given(
    tool=st.sampled_from(TOOLS),
    arguments=json_values,
    responses=st.dictionaries(
        st.sampled_from(["confirm", "name", "question", "roots", "go", "x"]),
        json_values,
        max_size=3,
    ),
    state=st.none() | st.text(max_size=80) | json_values,
)
def test_fuzz_tool_arguments_and_mrtr(
    token: str, tool: str, arguments: Any, responses: dict, state: Any
) -> None:
    params: dict[str, Any] = {
        "name": tool,
        "arguments": arguments,
        "inputResponses": responses,
        "_meta": meta(),
    }
    if state is not None:
        params["requestState"] = state
    before = counts()
    body = json.dumps({"jsonrpc": "2.0", "id": "f", "method": "tools/call", "params": params})
    check(send(headers_for(token, "tools/call", params), body.encode()), before=before)


# ---------------------------------------------------------------- headers
@FUZZ
@given(
    method=st.sampled_from(["tools/list", "tools/call", "tasks/get"]),
    overrides=st.dictionaries(
        st.sampled_from(
            [
                b"mcp-method",
                b"mcp-name",
                b"mcp-protocol-version",
                b"origin",
                b"host",
                b"content-type",
                b"accept",
                b"authorization",
                b"mcp-param-region",
                b"MCP-METHOD",
                b"content-length",
            ]
        ),
        st.none()
        | header_text.map(lambda t: t.encode("latin-1", "replace"))
        | st.binary(max_size=30),
        max_size=3,
    ),
)
def test_fuzz_headers(token: str, method: str, overrides: dict) -> None:
    params = {"_meta": meta(), "name": "routed", "taskId": "t-1", "arguments": {"region": "eu"}}
    before = counts()
    body = json.dumps({"jsonrpc": "2.0", "id": 3, "method": method, "params": params})
    check(send(headers_for(token, method, params, overrides), body.encode()), before=before)


# ---------------------------------------------------------------- sizes, depth, numbers
@pytest.mark.parametrize("where", ["params", "arguments", "meta", "id", "responses", "body"])
@pytest.mark.parametrize("kind", ["[", "{"])
def test_deep_nesting(token: str, where: str, kind: str) -> None:
    depth = 5000
    deep = ("[" * depth + "]" * depth) if kind == "[" else ('{"a":' * depth + "1" + "}" * depth)
    templates = {
        "params": '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":%s}',
        "arguments": '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"routed",'
        '"arguments":{"note":%s},"_meta":' + json.dumps(meta()) + "}}",
        "meta": '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":'
        '{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
        '"io.modelcontextprotocol/clientCapabilities":%s}}}',
        "id": '{"jsonrpc":"2.0","id":%s,"method":"tools/list","params":{}}',
        "responses": '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":'
        '"mrtr_confirm_then_apply","inputResponses":{"confirm":%s},"_meta":'
        + json.dumps(meta())
        + "}}",
        "body": "%s",
    }
    method = "tools/call" if where in ("arguments", "responses") else "tools/list"
    name = {"arguments": "routed", "responses": "mrtr_confirm_then_apply"}.get(where)
    before = counts()
    body = (templates[where] % deep).encode()
    check(send(headers_for(token, method, {"name": name} if name else {}), body), before=before)


@pytest.mark.parametrize("depth", [400, 900, 990])
def test_nesting_just_under_the_parser_limit(token: str, depth: int) -> None:
    """Deep enough to parse, deep enough to trouble recursive code after the parser."""
    nested: Any = 1
    for _ in range(depth):
        nested = {"a": nested}
    for tool, arguments in [
        ("echo_task", {"text": nested}),
        ("routed", {"note": nested}),
        ("mrtr_confirm_then_apply", {"target": nested}),
    ]:
        params = {"name": tool, "arguments": arguments, "_meta": meta()}
        try:
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
        except RecursionError:
            pytest.skip("the test's own encoder cannot go this deep")
        before = counts()
        check(send(headers_for(token, "tools/call", params), body.encode()), before=before)


@pytest.mark.parametrize("size", [100_000, 1_000_000, 1_048_577, 3_000_000])
def test_huge_strings(token: str, size: int) -> None:
    big = "x" * size
    cases = [
        ("tools/call", {"name": "routed", "arguments": {"note": big}}),
        ("tools/call", {"name": big[:5000], "arguments": {}}),
        ("tasks/get", {"taskId": big}),
        (
            "tools/call",
            {
                "name": "mrtr_confirm_then_apply",
                "requestState": big,
                "inputResponses": {"confirm": {"action": "accept"}},
            },
        ),
        ("tools/list", {"cursor": big}),
    ]
    for method, params in cases:
        params["_meta"] = meta()
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        before = counts()
        exchange = send(headers_for(token, method, params), body.encode())
        check(exchange, before=before)
        if len(body) > 1_048_576:
            assert exchange.status == 413


@pytest.mark.parametrize(
    "number",
    [
        "1e400",
        "-1e400",
        "NaN",
        "Infinity",
        "-Infinity",
        "18446744073709551616",
        "-0.0",
        "1e-400",
        "9" * 5000,
        "0." + "9" * 5000,
        "1E+2",
        "0x10",
    ],
)
def test_out_of_range_numbers(token: str, number: str) -> None:
    templates = [
        '{"jsonrpc":"2.0","id":%s,"method":"tools/list","params":{"_meta":%s}}',
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"routed",'
        '"arguments":{"count":%s},"_meta":%s}}',
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"structured_total",'
        '"arguments":{"values":[%s]},"_meta":%s}}',
        '{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":%s,"_meta":%s}}',
        '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":%s,"_meta":%s}}',
    ]
    for template in templates:
        body = template % (number, json.dumps(meta()))
        method = json.loads(template.replace("%s", "0"))["method"]
        extra = {}
        if method == "tools/call":
            extra = {
                b"mcp-name": json.loads(template.replace("%s", "0"))["params"]["name"].encode(),
                b"mcp-param-count": number.encode(),
            }
        elif method == "tasks/get":
            extra = {b"mcp-name": number.encode()}
        before = counts()
        check(send(headers_for(token, method, {}, extra), body.encode()), before=before)


# ---------------------------------------------------------------- regressions found by fuzzing
@pytest.mark.parametrize("value", [2**53, -(2**53), 2**64, [[2**60]], {"a": 10**20}])
def test_arguments_beyond_interoperable_integers_are_invalid_params(token: str, value) -> None:
    params = {"name": "echo_task", "arguments": {"text": value}, "_meta": meta()}
    body = json.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params})
    before = counts()
    exchange = send(headers_for(token, "tools/call", params), body.encode())
    check(exchange, before=before)
    assert exchange.body["error"]["code"] == -32602 and exchange.body["id"] == 9


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400", "-1e999"])
def test_non_json_numbers_are_parse_errors(token: str, literal: str) -> None:
    body = (
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"routed",'
        '"arguments":{"count":' + literal + '},"_meta":' + json.dumps(meta()) + "}}"
    )
    exchange = send(headers_for(token, "tools/call", {"name": "routed"}), body.encode())
    assert exchange.status == 400 and exchange.body["error"]["code"] == -32700
