"""An MCP client over the real ASGI application (httpx + ASGITransport), and schema checks."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

# Vendored in the repository (tests/schemas/README.md: source, version, digest).
SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas" / "mcp"
VERSION = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
TASK_CAPS = {"elicitation": {}, "sampling": {}, "roots": {}, "extensions": {TASKS: {}}}


def _load(name: str) -> dict[str, Any]:
    return json.loads((SCHEMA_DIR / name).read_text())


CORE = _load("core-2026-07-28.schema.json")
EXT = _load("tasks-extension.schema.json")


def validate(definition: str, instance: Any, *, ext: bool = False) -> None:
    """Validate against ``#/$defs/<definition>`` of the core (or tasks extension) schema."""
    document = EXT if ext else CORE
    Draft202012Validator({**document, "$ref": f"#/$defs/{definition}"}).validate(instance)


def validate_tools_call_result(result: dict[str, Any]) -> None:
    kind = result.get("resultType")
    if kind == "complete":
        validate("CallToolResult", result)
    elif kind == "input_required":
        validate("InputRequiredResult", result)
        assert result.get("inputRequests") or result.get("requestState")
    elif kind == "task":
        validate("CreateTaskResult", result, ext=True)
    else:
        raise AssertionError(f"unexpected resultType {kind!r}")


@dataclass
class Reply:
    status: int
    headers: httpx.Headers
    body: Any

    @property
    def result(self) -> dict[str, Any]:
        assert "result" in self.body, self.body
        return self.body["result"]  # type: ignore[no-any-return]

    @property
    def error(self) -> dict[str, Any]:
        assert "error" in self.body, self.body
        return self.body["error"]  # type: ignore[no-any-return]


class McpClient:
    def __init__(self, token: str | None) -> None:
        from mcptasks.asgi import application

        self.app = application
        self.token = token
        self.next_id = 0

    def raw(
        self, content: bytes | str, headers: dict[str, str] | None = None, method: str = "POST"
    ) -> Reply:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://127.0.0.1:8000"
            ) as client:
                return await client.request(method, "/mcp", content=content, headers=headers or {})

        response = asyncio.run(go())
        try:
            body = response.json() if response.content else None
        except ValueError:
            body = response.text
        return Reply(response.status_code, response.headers, body)

    def headers_for(self, method: str, params: dict[str, Any]) -> dict[str, str]:
        headers = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": VERSION,
            "mcp-method": method,
        }
        name = {
            "tools/call": params.get("name"),
            "tasks/get": params.get("taskId"),
            "tasks/update": params.get("taskId"),
            "tasks/cancel": params.get("taskId"),
        }.get(method)
        if isinstance(name, str):
            headers["mcp-name"] = name
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        return headers

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        capabilities: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        request_id: Any = None,
    ) -> Reply:
        params = dict(params or {})
        params.setdefault(
            "_meta",
            {
                "io.modelcontextprotocol/protocolVersion": VERSION,
                "io.modelcontextprotocol/clientCapabilities": TASK_CAPS
                if capabilities is None
                else capabilities,
                "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "1"},
            },
        )
        self.next_id += 1
        body = {
            "jsonrpc": "2.0",
            "id": self.next_id if request_id is None else request_id,
            "method": method,
            "params": params,
        }
        merged = self.headers_for(method, params)
        for key, value in (headers or {}).items():
            if value is None:
                merged.pop(key.lower(), None)
            else:
                merged[key.lower()] = value
        return self.raw(json.dumps(body), merged)

    def tool(self, name: str, arguments: dict[str, Any] | None = None, **kwargs: Any) -> Reply:
        return self.call("tools/call", {"name": name, "arguments": arguments or {}}, **kwargs)


@pytest.fixture
def mcp_for(cast: dict[str, dict[str, Any]]) -> Any:
    """``mcp_for("alice")`` → an MCP client authenticated with alice's token."""
    return lambda name: McpClient(cast[name]["token"])


@pytest.fixture
def mcp(mcp_for: Any) -> McpClient:
    return mcp_for("alice")  # type: ignore[no-any-return]


# ---------------------------------------------------------------- wire checks (PROTOCOL §7)
# Everything a response must satisfy: the schema of what it answers, plus what the schemas cannot
# express (literal resultType values, "at least one of inputRequests/requestState", the HTTP
# status of each error code, the reserved error range, id echo, serverInfo, no stray fields).
ERROR_OBJECT_DEFS = {
    -32700: "ParseError",
    -32600: "InvalidRequestError",
    -32601: "MethodNotFoundError",
    -32602: "InvalidParamsError",
    -32603: "InternalError",
}
ERROR_RESPONSE_DEFS = {
    -32020: "HeaderMismatchError",
    -32021: "MissingRequiredClientCapabilityError",
    -32022: "UnsupportedProtocolVersionError",
}
ERROR_HTTP_STATUS = {
    -32700: {400},
    -32600: {400},
    -32601: {404},
    -32020: {400},
    -32021: {400},
    -32022: {400},
    -32602: {200, 400},
    -32603: {200},
}
RESULT_DEFS = {
    "server/discover": ("DiscoverResult", False),
    "tools/list": ("ListToolsResult", False),
    "tasks/get": ("GetTaskResult", True),
    "tasks/update": ("UpdateTaskResult", True),
    "tasks/cancel": ("CancelTaskResult", True),
}
INPUT_METHODS = {"elicitation/create", "sampling/createMessage", "roots/list"}
CACHEABLE = {"server/discover", "tools/list"}
TASK_FORBIDDEN_KEYS = {"task", "ttl", "pollInterval", "requestState"}


def assert_error_response(status: int, body: Any, request_id: Any = None) -> dict[str, Any]:
    """A JSON-RPC error response on the wire; returns its ``error`` object."""
    assert isinstance(body, dict), body
    validate("JSONRPCErrorResponse", body)
    assert set(body) <= {"jsonrpc", "id", "error"}, body
    error = body["error"]
    code = error["code"]
    assert isinstance(code, int) and not isinstance(code, bool), error
    # E8: only -32020..-32022 from the reserved range, never -32002 / -32042.
    assert code in ERROR_OBJECT_DEFS or code in ERROR_RESPONSE_DEFS, f"unexpected code {code}"
    if code in ERROR_RESPONSE_DEFS:
        validate(ERROR_RESPONSE_DEFS[code], body)
    else:
        validate(ERROR_OBJECT_DEFS[code], error)
    assert isinstance(error["message"], str) and error["message"].strip(), error
    assert status in ERROR_HTTP_STATUS[code], (status, error)
    if code == -32021:
        required = error["data"]["requiredCapabilities"]
        assert isinstance(required, dict) and required, error
        assert all(isinstance(value, dict) for value in required.values()), error
    if code == -32022:
        assert isinstance(error["data"]["supported"], list) and error["data"]["supported"]
        assert isinstance(error["data"]["requested"], str)
    if request_id is not None:  # E9: echoed; omitted only when unreadable
        assert body.get("id") == request_id, (body.get("id"), request_id)
    return error  # type: ignore[no-any-return]


def assert_result(method: str, result: dict[str, Any], capabilities: dict[str, Any]) -> None:
    """The checks of one ``result`` object of ``method``."""
    kind = result.get("resultType")
    assert isinstance(kind, str), result  # E6
    declares_tasks = TASKS in (capabilities.get("extensions") or {})
    allowed = {"complete"}
    if method == "tools/call":
        allowed.add("input_required")  # M6: only where MRTR is allowed
        if declares_tasks:
            allowed.add("task")  # E7 / K2: only when this request declared the extension
    assert kind in allowed, (method, kind)
    info = (result.get("_meta") or {}).get("io.modelcontextprotocol/serverInfo")
    assert isinstance(info, dict) and info.get("name") and info.get("version"), result
    if method in CACHEABLE:  # E11
        assert isinstance(result["ttlMs"], int) and result["ttlMs"] >= 0, result
        assert result["cacheScope"] in ("public", "private"), result
    if method == "tools/call":
        validate_tools_call_result(result)
        if kind == "input_required":  # M7, M8, M9, M14
            requests = result.get("inputRequests") or {}
            assert isinstance(result.get("requestState"), str) or requests, result
            for request in requests.values():
                assert set(request) == {"method", "params"}, request
                assert request["method"] in INPUT_METHODS, request
                if request["method"] == "elicitation/create":
                    assert request["params"].get("mode", "form") == "form", request
                    assert "elicitation" in capabilities, request
                elif request["method"] == "sampling/createMessage":
                    assert "sampling" in capabilities, request
                else:
                    assert "roots" in capabilities, request
            assert not set(result) & {"content", "taskId", "status"}, result
        if kind == "task":
            assert not set(result) & TASK_FORBIDDEN_KEYS, result
            assert not set(result) & {"result", "error", "inputRequests"}, result
    elif method in RESULT_DEFS:
        definition, ext = RESULT_DEFS[method]
        validate(definition, result, ext=ext)
        if method in ("tasks/update", "tasks/cancel"):
            assert set(result) <= {"resultType", "_meta"}, result
        if method == "tasks/get":
            assert "requestState" not in result, result
    else:
        validate("Result", result)


def assert_wire(
    reply: Reply, *, method: str, request_id: Any, capabilities: dict[str, Any]
) -> None:
    """Every check a reply to a JSON-RPC request must pass."""
    assert reply.status != 500, reply.body
    if reply.status in (401, 403):  # authentication answers are HTTP, with a challenge
        assert reply.headers.get("www-authenticate", "").startswith("Bearer "), reply.headers
        return
    content_type = reply.headers.get("content-type", "")
    assert content_type.split(";")[0].strip() == "application/json", content_type  # T4
    body = reply.body
    assert isinstance(body, dict) and body.get("jsonrpc") == "2.0", body
    assert "method" not in body, body  # T6: never a request (or notification) to the client
    assert "mcp-session-id" not in reply.headers, reply.headers
    if "error" in body:
        assert "result" not in body, body
        assert_error_response(reply.status, body, request_id)
        return
    assert reply.status == 200, (reply.status, body)
    validate("JSONRPCResultResponse", body)
    assert body["id"] == request_id, body
    assert set(body) == {"jsonrpc", "id", "result"}, body
    if method == "server/discover":
        validate("DiscoverResultResponse", body)
    elif method == "tools/list":
        validate("ListToolsResultResponse", body)
    assert_result(method, body["result"], capabilities)


class CheckedClient(McpClient):
    """An McpClient that runs :func:`assert_wire` on every reply."""

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        capabilities: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        request_id: Any = None,
        check: bool = True,
    ) -> Reply:
        params = dict(params or {})
        caps = TASK_CAPS if capabilities is None else capabilities
        meta = params.get("_meta")
        if isinstance(meta, dict) and isinstance(
            meta.get("io.modelcontextprotocol/clientCapabilities"), dict
        ):
            caps = meta["io.modelcontextprotocol/clientCapabilities"]
        expected_id = self.next_id + 1 if request_id is None else request_id
        reply = super().call(
            method, params, capabilities=capabilities, headers=headers, request_id=request_id
        )
        if check:
            assert_wire(reply, method=method, request_id=expected_id, capabilities=caps)
        return reply


@pytest.fixture
def checked_for(cast: dict[str, dict[str, Any]]) -> Any:
    """``checked_for("alice")`` → a wire-checking client with alice's token."""
    return lambda name: CheckedClient(cast[name]["token"])


@pytest.fixture
def checked(checked_for: Any) -> CheckedClient:
    return checked_for("alice")  # type: ignore[no-any-return]


@dataclass
class AsgiExchange:
    """What the ASGI app sent for one request driven by :func:`asgi_request`."""

    messages: list[dict[str, Any]]

    @property
    def status(self) -> int | None:
        starts = [m for m in self.messages if m["type"] == "http.response.start"]
        return starts[0]["status"] if starts else None

    @property
    def body(self) -> Any:
        raw = b"".join(
            m.get("body", b"") for m in self.messages if m["type"] == "http.response.body"
        )
        return json.loads(raw) if raw else None


def asgi_request(
    headers: list[tuple[bytes, bytes]],
    body: bytes | list[dict[str, Any]],
    *,
    method: str = "POST",
    path: str = "/mcp",
    query: bytes = b"",
) -> AsgiExchange:
    """Drive the ASGI application with raw header bytes (what httpx refuses to send) or a
    scripted list of ``receive`` events (e.g. a disconnect); record every ``send``."""
    from mcptasks.asgi import application

    events = (
        body
        if isinstance(body, list)
        else [{"type": "http.request", "body": body, "more_body": False}]
    )
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    sent: list[dict[str, Any]] = []
    queue = list(events)

    async def receive() -> dict[str, Any]:
        if queue:
            return queue.pop(0)
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def go() -> None:
        await asyncio.wait_for(application(scope, receive, send), timeout=30)

    asyncio.run(go())
    return AsgiExchange(sent)


def mcp_headers(
    method: str, name: str | None = None, token: str | None = None
) -> list[tuple[bytes, bytes]]:
    """Raw ASGI headers of a well-formed request."""
    headers = [
        (b"host", b"127.0.0.1:8000"),
        (b"content-type", b"application/json"),
        (b"accept", b"application/json, text/event-stream"),
        (b"mcp-protocol-version", VERSION.encode()),
        (b"mcp-method", method.encode()),
    ]
    if name is not None:
        headers.append((b"mcp-name", name.encode()))
    if token:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    return headers


def request_body(
    method: str,
    params: dict[str, Any] | None = None,
    request_id: Any = 1,
    capabilities: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A well-formed JSON-RPC request (``_meta`` filled in unless params carry one)."""
    params = dict(params or {})
    params.setdefault(
        "_meta",
        {
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities": TASK_CAPS
            if capabilities is None
            else capabilities,
        },
    )
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
