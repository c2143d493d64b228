"""What a method handler receives: the parsed request, its capabilities and its principal."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the adapter's principal; the codec only carries it
    from mcptasks.auth import Principal

PROTOCOL_VERSION = "2026-07-28"
SUPPORTED_VERSIONS = [PROTOCOL_VERSION]
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"


@dataclass
class Call:
    id: str | int | None
    method: str
    params: dict[str, Any]
    capabilities: dict[str, Any]
    protocol_version: str
    principal: Principal
    headers: dict[str, str] = field(default_factory=dict)
    # ``(message, progress, total)`` → one notifications/progress on this request's response
    # stream; None unless the request carried a progressToken and accepts SSE (mcp/progress).
    progress: Callable[[str, float, float | None], None] | None = None

    @property
    def declares_tasks(self) -> bool:
        """The tasks extension, declared on *this* request (legacy ``tasks`` does not count)."""
        extensions = self.capabilities.get("extensions")
        return (
            self.protocol_version == PROTOCOL_VERSION
            and isinstance(extensions, dict)
            and TASKS_EXTENSION in extensions
        )
