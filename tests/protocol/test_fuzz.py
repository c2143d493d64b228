"""Fuzzing /mcp (hypothesis): envelopes, headers and params — wrong types, missing and extra
fields, huge strings, 5,000-deep nesting, bad UTF-8, out-of-range numbers, NUL characters and
lone surrogates (``\\udaf1`` escapes), Unicode and fullwidth digits in ids, cursors and
arguments.

For every input: never a 500, never an exception escaping the ASGI application, never -32603
(an internal error is a bug, not an answer to client input), every JSON body a well-formed
JSON-RPC response, and a rejected request leaves no Task row and no AuditEvent. A few hundred
examples in all, so the suite stays fast.
"""

from __future__ import annotations

import base64
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

# Unicode digits that str.isdigit() accepts and int() reads (or refuses), fullwidth letters.
ODD_DIGITS = ["²", "５", "٥", "𝟓", "١٢", "Ⅻ", "５\x00", "0x10", "1_000", " 7 ", "+5", "-0"]
# Any code point, lone surrogates included (json.dumps writes them as \\ud800-style escapes).
odd_text = st.text(
    alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()),
    max_size=12,
) | st.sampled_from(["\x00", "a\x00b", "\udaf1", "\ud800\udc00", "\udfff", *ODD_DIGITS])
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
    | odd_text
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


def header_value(text: str) -> bytes:
    """A header carrying ``text`` as a client would: plain when it is printable ASCII, else
    in the =?base64?…?= form (so the request gets past the header checks to the handler)."""
    if text.isascii() and text.isprintable() and text.strip() == text:
        return text.encode()
    text = json.loads(json.dumps(text))  # what the server reads: escaped pairs joined
    raw = text.encode("utf-8", "surrogatepass")
    return b"=?base64?" + base64.b64encode(raw) + b"?="


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
            headers[b"mcp-name"] = header_value(str(params[field]))
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
            assert error["code"] != -32603, error
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


# ---------------------------------------------------------------- NUL, surrogates, odd digits
@FUZZ
@given(
    method=st.sampled_from(
        [
            "tasks/get",
            "tasks/update",
            "tasks/cancel",
            "tools/call",
            "tools/list",
            "subscriptions/listen",
        ]
    ),
    where=st.sampled_from(
        ["taskId", "cursor", "name", "argument", "argument key", "response", "state", "id"]
    ),
    value=odd_text,
    real_task=st.booleans(),
)
def test_fuzz_nul_surrogates_and_unicode_digits_in_ids_cursors_and_arguments(
    token: str, make_task: Any, method: str, where: str, value: str, real_task: bool
) -> None:
    """Each goes where an id, a cursor or an argument is read; a real task's id with the value
    spliced in (mixed-width ids) must not find that task."""
    task_id = make_task("alice").pk if real_task else "t-1"
    params: dict[str, Any] = {"_meta": meta()}
    request_id: Any = 7
    if where == "taskId":
        params["taskId"] = task_id[:3] + value + task_id[3:] if real_task else value
    elif where == "cursor":
        params["cursor"] = value
    elif where == "name":
        params["name"] = value
    elif where in ("argument", "argument key"):
        params["name"] = "routed" if method == "tools/call" else value
        params["arguments"] = {value: "eu"} if where == "argument key" else {"region": value}
    elif where == "response":
        params["inputResponses"] = {"confirm": {"action": "accept", "content": {"x": value}}}
    elif where == "state":
        params["requestState"] = value
    else:
        request_id = value
    if method in ("tasks/get", "tasks/update", "tasks/cancel"):
        params.setdefault("taskId", task_id)
    if method == "tools/call":
        params.setdefault("name", "mrtr_confirm_then_apply")
    if method == "subscriptions/listen":
        params["notifications"] = {"taskIds": [params.pop("taskId", value)]}
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
    before = counts()
    headers = headers_for(token, method, params)
    if method == "tools/call" and isinstance(params.get("arguments", {}).get("region"), str):
        headers.append((b"mcp-param-region", header_value(params["arguments"]["region"])))
    exchange = send(headers, body.encode())
    check(exchange, before=before)
    read = json.loads(json.dumps(value))  # as the server reads it: escaped pairs joined
    unstorable = "\x00" in read or read.encode("utf-8", "surrogatepass") != read.encode(
        "utf-8", "replace"
    )
    if unstorable and isinstance(exchange.body, dict) and "error" in exchange.body:
        assert exchange.body["error"]["code"] in (-32600, -32602, -32700), exchange.body
    if where == "taskId" and real_task and method == "tasks/get" and value:
        assert "error" in exchange.body, exchange.body  # a mixed-width id is not the task's id


# ---------------------------------------------------------------- regressions found by fuzzing
UNSTORABLE_AT = [
    ("tasks/get", lambda text: {"taskId": text}),
    ("tasks/cancel", lambda text: {"taskId": text}),
    ("tasks/update", lambda text: {"taskId": text, "inputResponses": {}}),
    ("tools/call", lambda text: {"name": "echo_task", "arguments": {"text": text}}),
    ("tools/call", lambda text: {"name": "echo_task", "arguments": {text: "x"}}),
    ("tools/call", lambda text: {"name": text, "arguments": {}}),
    ("tools/list", lambda text: {"cursor": text}),
]


@pytest.mark.parametrize("text", ["ab\x00cd", "ab\udaf1cd", "\udc00", "\x00"])
def test_nul_and_lone_surrogates_are_invalid_params_and_store_nothing(
    token: str, text: str
) -> None:
    """These answered -32603 on PostgreSQL (which refuses NUL in text), or could not be encoded
    in the UTF-8 response at all (a lone surrogate echoed back)."""
    for method, make_params in UNSTORABLE_AT:
        params = {**make_params(text), "_meta": meta()}
        body = json.dumps({"jsonrpc": "2.0", "id": 11, "method": method, "params": params})
        before = counts()
        exchange = send(headers_for(token, method, params), body.encode())
        check(exchange, before=before)
        assert exchange.status == 400 and exchange.body["id"] == 11, (method, exchange.body)
        assert exchange.body["error"]["code"] == -32602, (method, exchange.body)
        assert "NUL character or a lone surrogate" in exchange.body["error"]["message"]
        assert counts() == before


def test_unstorable_text_in_the_request_id_is_an_invalid_request(token: str) -> None:
    for request_id in ["a\x00b", "\udaf1"]:
        body = json.dumps(
            {"jsonrpc": "2.0", "id": request_id, "method": "tools/list", "params": {}}
        )
        exchange = send(headers_for(token, "tools/list", {}), body.encode())
        check(exchange, before=counts())
        assert exchange.body["error"]["code"] == -32600 and "id" not in exchange.body


def test_a_task_id_in_other_digits_or_widths_is_not_that_task(token: str, make_task: Any) -> None:
    task = make_task("alice")
    fullwidth = "".join(
        chr(ord(char) + 0xFEE0) if char.isascii() and char.isalnum() else char for char in task.pk
    )
    for task_id in (fullwidth, task.pk[:-1] + "５", task.pk.upper(), f" {task.pk}"):
        params = {"taskId": task_id, "_meta": meta()}
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": params})
        exchange = send(headers_for(token, "tasks/get", params), body.encode())
        check(exchange, before=counts())
        assert exchange.body["error"]["code"] == -32602, (task_id, exchange.body)
    params = {"taskId": task.pk, "_meta": meta()}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": params})
    assert send(headers_for(token, "tasks/get", params), body.encode()).body["result"]


@pytest.mark.parametrize(
    "count, header",
    [(5, "５"), (5, "٥"), (50, "5_0"), (5, "+5"), (5, "0x5"), (5, "5."), (5, "Infinity")],
)
def test_param_headers_match_numbers_written_as_json_only(
    token: str, count: int, header: str
) -> None:
    """float() reads "５" as 5 and "5_0" as 50: such a header once matched the argument."""
    params = {"name": "routed", "arguments": {"count": count}, "_meta": meta()}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
    headers = [
        *headers_for(token, "tools/call", params),
        (b"mcp-param-count", header_value(header)),
    ]
    exchange = send(headers, body.encode())
    check(exchange, before=counts())
    assert exchange.status == 400 and exchange.body["error"]["code"] == -32020, exchange.body
    same = [*headers_for(token, "tools/call", params), (b"mcp-param-count", f"{count}.0".encode())]
    assert send(same, body.encode()).body["result"]["resultType"] == "complete"


def test_a_bearer_token_holding_a_nul_is_401(token: str) -> None:
    """Its lookup reached the database, which refuses NUL (-32603 on PostgreSQL)."""
    lookup = token.split("_")[1]
    params = {"_meta": meta()}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params})
    for credential in ["mcpt_ab\x00c_def", f"mcpt_{lookup}\x00_x"]:
        overrides = {b"authorization": f"Bearer {credential}".encode()}
        exchange = send(headers_for(token, "tools/list", params, overrides), body.encode())
        check(exchange, before=counts())
        assert exchange.status == 401, exchange.body
