"""Real local receivers for the sinks: an HTTP server (HEC, Slack), a TCP and a TLS syslog
collector that parse RFC 6587 octet-counted frames, a throwaway CA-less self-signed certificate,
and message factories."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from mcptasks.sinks import Message

WHEN = dt.datetime(2026, 12, 1, 10, 15, 30, 250000, tzinfo=dt.UTC)


# ---------------------------------------------------------------- messages


def audit_row(
    action: str = "task.created", seq: int = 7, actor: str = "amy", **data: Any
) -> dict[str, Any]:
    """A stored audit event (the fields of audit.chain.ROW_FIELDS)."""
    return {
        "chain": "tenant:acme",
        "seq": seq,
        "created_at": WHEN.isoformat(),
        "tenant_id": 1,
        "actor_kind": "user",
        "actor_id": "3",
        "actor_display": actor,
        "action": action,
        "task_id": "t-123",
        "data": data,
        "request_id": "req-1",
        "prev_hash": "a" * 64,
        "hash": "b" * 64,
    }


def audit_message(
    action: str = "task.created", seq: int = 7, actor: str = "amy", **data: Any
) -> Message:
    """An ``audit.event`` message as the outbox sends it: the chain position and links, and
    the hashed body under ``event``."""
    row = audit_row(action, seq, actor, **data)
    body = {key: value for key, value in row.items() if key not in ("prev_hash", "hash")}
    return Message(
        id=f"audit:tenant:acme:{seq}",
        type="audit.event",
        timestamp=WHEN,
        tenant="acme",
        data={
            "chain": row["chain"],
            "sequence": seq,
            "prev_hash": row["prev_hash"],
            "hash": row["hash"],
            "event": body,
        },
    )


def approval_message(**extra: Any) -> Message:
    """An ``approval.requested`` message as the outbox sends it: the task as its destination's
    owner may see it, and the gate."""
    return Message(
        id="evt-approval-1",
        type="approval.requested",
        timestamp=WHEN,
        tenant="acme",
        data={
            "task": {"taskId": "t-9", "status": "input_required", "ttlMs": 3600000},
            "tool": "deploy",
            "state": "input_required",
            "outcome": "",
            "version": 4,
            "dashboard_url": "https://mcp.example.com/dashboard/tasks/t-9/",
            "approval": {
                "key": "approve",
                "message": "Deploy api 1.4.2 to production?",
                "summary": {"service": "api", "version": "1.4.2", "environment": "production"},
                "required": 2,
                "reviewers": ["amy", "olga"],
                "deadline_at": None,
            },
            **extra,
        },
        url="https://mcp.example.com/dashboard/tasks/t-9/answer/approve/",
        recipients=("olga@example.com", "amy@example.com"),
    )


# ---------------------------------------------------------------- TLS


@dataclass(frozen=True)
class Certificate:
    cert: Path
    key: Path


def make_certificate(directory: Path, name: str = "localhost") -> Certificate:
    """A self-signed certificate for ``name`` and 127.0.0.1 (an EC key), as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(name), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path = directory / f"{name}.crt"
    key_path = directory / f"{name}.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return Certificate(cert_path, key_path)


@pytest.fixture
def certificate(tmp_path: Path, settings: Any) -> Certificate:
    """A collector's certificate, in the CA directory destinations name bundles from."""
    settings.MCPTASKS_SINKS_CA_DIR = tmp_path
    return make_certificate(tmp_path)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the receiver")
        time.sleep(0.01)


# ---------------------------------------------------------------- HTTP receiver


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class HttpReceiver:
    """Records each POST; ``respond(request)`` gives the (status, body) to answer."""

    respond: Callable[[Request], tuple[int, bytes]]
    requests: list[Request] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"


def start_http(receiver: HttpReceiver, tls: Certificate | None = None) -> HttpReceiver:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            request = Request(self.path, dict(self.headers.items()), self.rfile.read(length))
            receiver.requests.append(request)
            status, body = receiver.respond(request)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls.cert, tls.key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    receiver.server = server
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return receiver


@pytest.fixture
def http_receivers() -> Iterator[Callable[..., HttpReceiver]]:
    started: list[HttpReceiver] = []

    def start(
        respond: Callable[[Request], tuple[int, bytes]], tls: Certificate | None = None
    ) -> HttpReceiver:
        receiver = start_http(HttpReceiver(respond), tls)
        started.append(receiver)
        return receiver

    yield start
    for receiver in started:
        assert receiver.server is not None
        receiver.server.shutdown()
        receiver.server.server_close()


# ---------------------------------------------------------------- syslog receiver


def read_frames(stream: Any) -> Iterator[bytes]:
    """RFC 6587 octet counting: ``MSG-LEN SP SYSLOG-MSG``, repeated until the stream ends."""
    while True:
        digits = b""
        while True:
            char = stream.read(1)
            if not char:
                if digits:
                    raise AssertionError(f"stream ended inside a length: {digits!r}")
                return
            if char == b" ":
                break
            assert char.isdigit(), f"not an octet count: {digits + char!r}"
            digits += char
        assert digits and not digits.startswith(b"0"), f"bad octet count {digits!r}"
        length = int(digits)
        payload = stream.read(length)
        assert len(payload) == length, "frame shorter than its count"
        yield payload


@dataclass
class SyslogReceiver:
    port: int
    messages: list[bytes] = field(default_factory=list)
    connections: int = 0
    errors: list[str] = field(default_factory=list)
    server: socketserver.ThreadingTCPServer | None = None


@pytest.fixture
def syslog_receivers() -> Iterator[Callable[..., SyslogReceiver]]:
    started: list[socketserver.ThreadingTCPServer] = []

    def start(tls: Certificate | None = None) -> SyslogReceiver:
        context = None
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(tls.cert, tls.key)

        class Handler(socketserver.StreamRequestHandler):
            def setup(self) -> None:
                if context is not None:
                    self.request = context.wrap_socket(self.request, server_side=True)
                super().setup()

            def handle(self) -> None:
                receiver.connections += 1
                try:
                    receiver.messages.extend(read_frames(self.rfile))
                except (AssertionError, OSError) as error:
                    receiver.errors.append(str(error))

        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                receiver.errors.append("handler failed")  # e.g. a refused TLS handshake

        server = Server(("127.0.0.1", 0), Handler)
        receiver = SyslogReceiver(port=int(server.server_address[1]), server=server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        return receiver

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


def json_body(request: Request) -> Any:
    return json.loads(request.body)
