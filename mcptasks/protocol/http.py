"""Placeholder until the endpoint issue: answers 404 on /mcp."""

from __future__ import annotations

from typing import Any


class McpApplication:
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 404,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b"{}"})
