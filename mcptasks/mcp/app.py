"""The MCP side of the ASGI application: the `/mcp` HTTP router and the embedded worker's
lifespan. mcptasks/routing.py composes it with the dashboard's websocket."""

from __future__ import annotations

from typing import Any

ASGIApp = Any


def http_router(django_application: ASGIApp) -> ASGIApp:
    """HTTP: ``/mcp`` to the MCP application, every other path to ``django_application``."""
    from mcptasks.mcp.http import McpApplication

    mcp = McpApplication()

    async def route(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/mcp":
            await mcp(scope, receive, send)
        else:
            await django_application(scope, receive, send)

    return route


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
