"""JSON-RPC 2.0 envelope parsing and response building. Plain Python (STYLE rule 9)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from mcptasks import inputs
from mcptasks.protocol.errors import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, McpError

_MISSING = object()


@dataclass
class Message:
    """One parsed request (``is_notification`` False) or notification."""

    method: str
    params: dict[str, Any] = field(default_factory=dict)
    id: str | int | None = None
    is_notification: bool = False


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _finite_float(text: str) -> float:
    """JSON numbers only: Python would turn ``1e400`` into ``inf``, which JSON cannot carry."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:32]} is out of range")
    return value


def parse(body: bytes) -> Message:
    """Parse a POST body into one message; raise McpError (-32700 / -32600) otherwise."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise McpError(PARSE_ERROR, "Parse error: the body is not valid UTF-8") from None
    try:
        payload = json.loads(text, parse_constant=_not_json, parse_float=_finite_float)
    except RecursionError:
        raise McpError(PARSE_ERROR, "Parse error: JSON nested too deeply") from None
    except ValueError as exc:
        raise McpError(PARSE_ERROR, f"Parse error: {exc}") from None
    if isinstance(payload, list):
        raise McpError(
            INVALID_REQUEST, "Invalid Request: batches are not supported; send one JSON-RPC message"
        )
    if not isinstance(payload, dict):
        raise McpError(INVALID_REQUEST, "Invalid Request: the body must be a JSON-RPC object")
    request_id = payload.get("id", _MISSING)
    readable_id = request_id if _valid_id(request_id) else None
    unstorable = inputs.unstorable_text(payload)
    if unstorable is not None:
        # A NUL or a lone surrogate (from a \\u escape): text no handler may store or compare in
        # a query, and a lone surrogate cannot even be echoed back in a UTF-8 response.
        if unstorable == "id" or unstorable.startswith("id."):
            readable_id = None
        reason = f"{unstorable or 'the message'} holds a NUL character or a lone surrogate"
        if not unstorable.startswith("params."):
            raise _invalid(f"{reason}; text must be valid Unicode without NUL", readable_id)
        error = McpError(
            INVALID_PARAMS,
            f"Invalid params: {reason}; text must be valid Unicode without NUL",
            http_status=400,
        )
        error.request_id = readable_id  # type: ignore[attr-defined]
        raise error
    if payload.get("jsonrpc") != "2.0":
        raise _invalid('jsonrpc must be "2.0"', readable_id)
    if "method" not in payload and ("result" in payload or "error" in payload):
        raise _invalid("clients must not send JSON-RPC responses", readable_id)
    method = payload.get("method")
    if not isinstance(method, str) or not method:
        raise _invalid("method must be a non-empty string", readable_id)
    params = payload.get("params", {})
    if not isinstance(params, dict):
        raise _invalid("params must be an object", readable_id)
    if request_id is _MISSING:
        return Message(method=method, params=params, is_notification=True)
    if not _valid_id(request_id):
        raise _invalid("id must be a string or an integer (never null)", None)
    return Message(method=method, params=params, id=request_id)


def _valid_id(value: Any) -> bool:
    return (
        isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
    ) and value is not _MISSING


def _invalid(reason: str, request_id: Any) -> McpError:
    error = McpError(INVALID_REQUEST, f"Invalid Request: {reason}")
    error.request_id = request_id  # type: ignore[attr-defined]
    return error


def result_response(request_id: str | int | None, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_response(request_id: str | int | None, error: McpError) -> dict[str, Any]:
    response: dict[str, Any] = {"jsonrpc": "2.0"}
    if request_id is not None:
        response["id"] = request_id
    response["error"] = error.error_object()
    return response
