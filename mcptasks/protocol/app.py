"""The ASGI router: `/mcp` goes to the MCP application, everything else to Django."""

from __future__ import annotations

from typing import Any

from channels.routing import ProtocolTypeRouter

ASGIApp = Any


def build_application(django_application: ASGIApp) -> ASGIApp:
    from mcptasks.protocol.http import McpApplication

    mcp = McpApplication()

    async def http_router(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/mcp":
            await mcp(scope, receive, send)
        else:
            await django_application(scope, receive, send)

    from channels.auth import AuthMiddlewareStack
    from channels.routing import URLRouter
    from channels.security.websocket import AllowedHostsOriginValidator
    from django.urls import path, re_path

    from dashboard.consumers import NoSuchSocket, TaskUpdatesConsumer

    websocket = AllowedHostsOriginValidator(
        AuthMiddlewareStack(
            URLRouter(
                [
                    path("ws/tasks", TaskUpdatesConsumer.as_asgi()),
                    # Any other path: refused with a close frame, not a routing exception.
                    re_path(r"", NoSuchSocket.as_asgi()),
                ]
            )
        )
    )
    return ProtocolTypeRouter({"http": http_router, "websocket": websocket})
