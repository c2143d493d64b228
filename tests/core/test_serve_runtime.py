"""What ``manage.py serve`` runs uvicorn on: uvloop's event loop and the httptools parser
(locked dependencies; uvicorn picks them when present). On this machine they took the fast
``tasks/get`` from 1,190-1,215 to 1,400-1,610 req/s (bench/PROFILE-23.md)."""

from __future__ import annotations

import asyncio

from mcptasks.management.commands.serve import uvicorn_config


def test_serve_parses_http_with_httptools() -> None:
    config = uvicorn_config("127.0.0.1", 0)
    config.load()
    assert config.http_protocol_class.__name__ == "HttpToolsProtocol"


def test_serve_runs_on_uvloops_event_loop() -> None:
    import uvloop

    loop_factory = uvicorn_config("127.0.0.1", 0).get_loop_factory()
    assert loop_factory is not None
    loop = loop_factory()
    try:
        assert isinstance(loop, uvloop.Loop)
        assert loop.run_until_complete(asyncio.sleep(0, result="ran")) == "ran"
    finally:
        loop.close()
