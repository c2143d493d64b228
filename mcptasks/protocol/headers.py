"""SEP-2243 standard headers: value decoding and header/body agreement. Plain Python."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from mcptasks.protocol.errors import HEADER_MISMATCH, McpError

SENTINEL = re.compile(r"^=\?base64\?(.*)\?=$", re.DOTALL)
# Visible ASCII plus space and tab (surrounding whitespace is trimmed first).
_VALID_VALUE = re.compile(r"^[\x20-\x7e\t]*$")
# A number as JSON writes it (float() also reads "５", "5_0" and " 5 ").
_JSON_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")

# Which params field Mcp-Name must equal, per method.
NAME_FIELD = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}
NAME_REQUIRED_STRICTLY = frozenset({"tools/call", "prompts/get", "resources/read"})


def mismatch(message: str) -> McpError:
    return McpError(HEADER_MISMATCH, f"Header mismatch: {message}")


def decode_value(header: str, raw: str) -> str:
    """Trim and decode one header value (``=?base64?…?=`` sentinel); raise -32020 if invalid."""
    value = raw.strip(" \t")
    if not _VALID_VALUE.match(value):
        raise mismatch(f"{header} contains invalid characters")
    match = SENTINEL.match(value)
    if match is None:
        return value
    encoded = match.group(1)
    try:
        decoded = base64.b64decode(encoded, validate=True)
        # Only the canonical encoding: b64decode tolerates excess padding ("…YXNr=").
        if base64.b64encode(decoded).decode() != encoded:
            raise ValueError(encoded)
        return decoded.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise mismatch(f"{header} has invalid base64 in its =?base64?…?= value") from None


def header_form(value: Any) -> str | None:
    """The string a header must carry for a body value (None if not representable)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str):
        return value
    return None


def values_equal(header_value: str, body_value: Any) -> bool:
    expected = header_form(body_value)
    if expected is None:
        return False
    if expected == header_value:
        return True
    if (
        isinstance(body_value, int | float)
        and not isinstance(body_value, bool)
        and _JSON_NUMBER.fullmatch(header_value)
    ):
        try:
            return float(header_value) == float(body_value)  # 42.0 equals 42
        except ValueError:
            return False
    return False


def check_method_and_name(
    headers: dict[str, str], method: str, params: dict[str, Any], *, strict_task_name: bool
) -> bool:
    """Validate Mcp-Method and Mcp-Name against the body.

    Returns True when a tolerated ``Mcp-Name`` was missing on ``tasks/*`` (counted as interop).
    """
    raw_method = headers.get("mcp-method")
    if raw_method is None:
        raise mismatch("the Mcp-Method header is required")
    if decode_value("Mcp-Method", raw_method) != method:
        raise mismatch(f"Mcp-Method header does not match the body method {method!r}")
    field = NAME_FIELD.get(method)
    if field is None:
        return False
    raw_name = headers.get("mcp-name")
    if raw_name is None:
        if method in NAME_REQUIRED_STRICTLY or strict_task_name:
            raise mismatch(f"the Mcp-Name header is required for {method}")
        return True
    name = decode_value("Mcp-Name", raw_name)
    if not values_equal(name, params.get(field)):
        raise mismatch(f"Mcp-Name header does not match params.{field}")
    return False


def header_params(input_schema: dict[str, Any]) -> dict[str, str]:
    """``{argument: header name}`` for properties annotated ``x-mcp-header``."""
    found = {}
    for name, prop in (input_schema.get("properties") or {}).items():
        if isinstance(prop, dict) and isinstance(prop.get("x-mcp-header"), str):
            found[name] = prop["x-mcp-header"]
    return found


def check_param_headers(
    headers: dict[str, str], input_schema: dict[str, Any], arguments: dict[str, Any]
) -> None:
    """Every present, non-null ``x-mcp-header`` argument needs a matching Mcp-Param-* header."""
    for argument, header_name in header_params(input_schema).items():
        value = arguments.get(argument)
        if value is None:
            continue
        raw = headers.get(f"mcp-param-{header_name.lower()}")
        if raw is None:
            raise mismatch(f"the Mcp-Param-{header_name} header is required")
        if not values_equal(decode_value(f"Mcp-Param-{header_name}", raw), value):
            raise mismatch(f"Mcp-Param-{header_name} does not match arguments.{argument}")
