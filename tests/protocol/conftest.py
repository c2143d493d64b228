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

SCHEMA_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "mcp-schema"
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

    def raw(self, content: bytes | str, headers: dict[str, str] | None = None,
            method: str = "POST") -> Reply:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport,
                                         base_url="http://127.0.0.1:8000") as client:
                return await client.request(method, "/mcp", content=content,
                                            headers=headers or {})

        response = asyncio.run(go())
        try:
            body = response.json() if response.content else None
        except ValueError:
            body = response.text
        return Reply(response.status_code, response.headers, body)

    def headers_for(self, method: str, params: dict[str, Any]) -> dict[str, str]:
        headers = {"content-type": "application/json",
                   "accept": "application/json, text/event-stream",
                   "mcp-protocol-version": VERSION, "mcp-method": method}
        name = {"tools/call": params.get("name"), "tasks/get": params.get("taskId"),
                "tasks/update": params.get("taskId"),
                "tasks/cancel": params.get("taskId")}.get(method)
        if isinstance(name, str):
            headers["mcp-name"] = name
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        return headers

    def call(self, method: str, params: dict[str, Any] | None = None, *,
             capabilities: dict[str, Any] | None = None,
             headers: dict[str, str] | None = None, request_id: Any = None) -> Reply:
        params = dict(params or {})
        params.setdefault("_meta", {
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities":
                TASK_CAPS if capabilities is None else capabilities,
            "io.modelcontextprotocol/clientInfo": {"name": "tests", "version": "1"},
        })
        self.next_id += 1
        body = {"jsonrpc": "2.0", "id": self.next_id if request_id is None else request_id,
                "method": method, "params": params}
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
