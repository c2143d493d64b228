"""A local HTTP webhook receiver for the outbox tests: records every request (headers and raw
body) and answers the status it is told to; it can be really stopped and started again on the
same port."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.production.processes import free_port


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    port: int = field(default_factory=free_port)
    status: int = 204
    delay_s: float = 0.0  # how long each request is held before the answer
    requests: list[Received] = field(default_factory=list)
    arrived: int = 0  # requests that reached the handler (answered or not)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> Receiver:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                with owner._lock:
                    owner.arrived += 1
                if owner.delay_s:
                    time.sleep(owner.delay_s)
                with owner._lock:
                    owner.requests.append(
                        Received({k.lower(): v for k, v in self.headers.items()}, body)
                    )
                self.send_response(owner.status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def ok(self) -> list[Received]:
        """Requests answered 2xx (every request while ``status`` was 2xx is recorded)."""
        with self._lock:
            return list(self.requests)
