"""JSON-RPC and MCP error codes (named constants, never bare numbers) and the error type."""

from __future__ import annotations

from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022

# HTTP status of each error code on the wire (PROTOCOL §1.4); others answer 200.
HTTP_STATUS = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    METHOD_NOT_FOUND: 404,
    HEADER_MISMATCH: 400,
    MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
}


class McpError(Exception):
    """A JSON-RPC error response. ``http_status`` defaults from the code."""

    def __init__(
        self, code: int, message: str, data: Any = None, http_status: int | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.http_status = http_status or HTTP_STATUS.get(code, 200)

    def error_object(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


def invalid_params(message: str, data: Any = None, http_status: int = 200) -> McpError:
    return McpError(INVALID_PARAMS, message, data, http_status=http_status)


def missing_capability(required: dict[str, Any], what: str = "") -> McpError:
    message = "Missing required client capability"
    if what:
        message += f": {what}"
    return McpError(MISSING_REQUIRED_CLIENT_CAPABILITY, message, {"requiredCapabilities": required})
