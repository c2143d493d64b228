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


def with_embedded_worker(application: ASGIApp) -> ASGIApp:
    """``application``, starting the embedded default's in-process worker and beat with the
    server: at the ASGI lifespan startup (uvicorn, hypercorn), else on the first request (a
    server without lifespan support, such as daphne). ``manage.py serve`` starts them itself,
    or declines them with ``--no-worker``."""
    from mcptasks import embedded

    async def lifespan(receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                embedded.ensure_started()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                embedded.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        embedded.ensure_started()
        await application(scope, receive, send)

    return app
