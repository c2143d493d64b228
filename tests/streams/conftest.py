"""A real HTTP server (uvicorn in a thread, this process's test database) for streaming tests:
httpx's ASGITransport buffers whole responses, so it cannot test an open stream."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import uvicorn


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serving(application: Any) -> Iterator[str]:
    """Serve ``application`` with uvicorn in a thread of this process; yield its base URL."""
    port = free_port()
    config = uvicorn.Config(
        application, host="127.0.0.1", port=port, log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def server_url(transactional_db: None) -> Iterator[str]:
    from mcptasks.asgi import application

    with serving(application) as url:
        yield url
