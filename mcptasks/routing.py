"""The ASGI application's routing: HTTP (``/mcp`` beside Django) and the dashboard's websocket.
Composed here so neither side imports the other (the MCP adapter knows no dashboard)."""

from __future__ import annotations

from typing import Any

from channels.auth import AuthMiddlewareStack
from channels.routing import ProtocolTypeRouter, URLRouter
from channels.security.websocket import AllowedHostsOriginValidator
from django.urls import path, re_path

from dashboard.consumers import NoSuchSocket, TaskUpdatesConsumer
from mcptasks.mcp.app import ASGIApp, http_router


def websocket_router() -> ASGIApp:
    return AllowedHostsOriginValidator(
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


def build_application(django_application: ASGIApp) -> Any:
    return ProtocolTypeRouter(
        {"http": http_router(django_application), "websocket": websocket_router()}
    )
