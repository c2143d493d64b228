"""Abuse limits (issue 19): login lockout, bounded failed-login auditing, the unknown-task-id
throttle on every channel, foreign and unknown ids at the same cost, bounded listen streams,
bounded export verification, and X-Forwarded-For believed only from configured proxies."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import zipfile
from datetime import timedelta
from typing import Any

import httpx
import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from audit.models import AuditEvent
from mcptasks import access, limits
from mcptasks.client_ip import client_ip
from mcptasks.models import ApiToken, new_task_id
from tests.protocol.conftest import TASK_CAPS, VERSION, McpClient
from tests.streams.conftest import server_url  # noqa: F401
from tests.streams.test_listen import listen_body, read_stream

pytestmark = pytest.mark.django_db(transaction=True)
LOGIN = "/login/"


@pytest.fixture(autouse=True)
def fresh_buckets() -> Any:
    limits.buckets.cache_clear()
    limits.buckets().reset()
    yield
    limits.buckets().reset()
    limits.buckets.cache_clear()


@pytest.fixture(autouse=True)
def plain_http(settings: Any) -> None:
    settings.SECURE_SSL_REDIRECT = False


def api_client(entry: dict[str, Any]) -> APIClient:
    _, secret = ApiToken.issue(user=entry["user"], tenant=entry["tenant"], scopes=["api", "mcp"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    client._secret = secret  # type: ignore[attr-defined]
    return client


# ---------------------------------------------------------------- unknown task ids
def test_guessing_task_ids_is_throttled_on_rest_and_the_dashboard_from_one_budget(
    cast: dict[str, Any], settings: Any
) -> None:
    settings.MCPTASKS_UNKNOWN_TASK_BURST = 3
    settings.MCPTASKS_UNKNOWN_TASK_RATE = 0.001  # no refill while the test runs, however slow
    alice = api_client(cast["alice"])
    codes = [alice.get(f"/api/v1/tasks/guess-{n}").status_code for n in range(4)]
    assert codes == [404, 404, 404, 429]
    refused = alice.get("/api/v1/tasks/guess-5")
    assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
    assert "unknown task ids" in refused.json()["detail"]
    # The same budget on the dashboard and MCP: alice is throttled there too.
    dashboard = Client()
    dashboard.force_login(cast["alice"]["user"])
    page = dashboard.get(reverse("dashboard:task", args=["guess-6"]))
    assert page.status_code == 429 and page["Retry-After"]
    assert McpClient(alice._secret).call("tasks/get", {"taskId": "guess-7"}).status == 429  # type: ignore[attr-defined]
    # Others are not.
    bob = Client()
    bob.force_login(cast["bob"]["user"])
    assert [bob.get(reverse("dashboard:task", args=[f"b-{n}"])).status_code for n in range(3)] == [
        404
    ] * 3
    assert bob.get(reverse("dashboard:task", args=["b-4"])).status_code == 429


TIMESTAMP = re.compile(r"'\d{4}-\d\d-\d\d[ T][\d:.+]+'")


def normalized(queries: list[dict[str, Any]], task_id: str) -> list[str]:
    """The statements, with the id asked and the clock's readings (session expiry) masked."""
    return [TIMESTAMP.sub("<now>", q["sql"].replace(task_id, "<id>")) for q in queries]


def test_foreign_and_unknown_ids_take_the_same_queries_on_every_channel(
    cast: dict[str, Any], make_task: Any
) -> None:
    """Visibility is decided in the query that fetches: "not yours" and "not there" run the same
    statements (one for the lookup), so neither their bytes nor their work tells them apart."""
    foreign = make_task("bob").pk
    unknown = new_task_id()
    assert len(unknown) == len(foreign)
    alice = cast["alice"]["user"]

    def lookups(run: Any) -> dict[str, list[str]]:
        seen = {}
        for task_id in (foreign, unknown):
            run(task_id)  # warm: a session, a token's first use, roles
            with CaptureQueriesContext(connection) as captured:
                run(task_id)
            seen[task_id] = normalized(captured.captured_queries, task_id)
        return seen

    # access.py: one statement, the same.
    fresh = type(alice).objects.get(pk=alice.pk)
    with CaptureQueriesContext(connection) as captured:
        assert access.get_visible_task(fresh, foreign) is None
    assert len(captured) == 1
    by_id = lookups(lambda task_id: access.get_visible_task(alice, task_id))
    assert by_id[foreign] == by_id[unknown] and len(by_id[foreign]) == 1

    api = api_client(cast["alice"])
    by_id = lookups(lambda task_id: api.get(f"/api/v1/tasks/{task_id}"))
    assert api.get(f"/api/v1/tasks/{foreign}").status_code == 404
    assert by_id[foreign] == by_id[unknown]

    dashboard = Client()
    dashboard.force_login(alice)
    by_id = lookups(lambda task_id: dashboard.get(reverse("dashboard:task", args=[task_id])))
    assert by_id[foreign] == by_id[unknown]


# ---------------------------------------------------------------- logins
def login(client: Client, username: str, password: str) -> int:
    response = client.post(LOGIN, {"username": username, "password": password})
    return response.status_code


def test_login_is_locked_out_after_the_failure_limit_until_the_window_ends(
    cast: dict[str, Any], settings: Any
) -> None:
    alice = cast["alice"]
    client = Client(REMOTE_ADDR="198.51.100.7")
    limit = settings.MCPTASKS_LOGIN_FAILURE_LIMIT
    assert [login(client, "alice", "wrong") for _ in range(limit - 1)] == [200] * (limit - 1)
    assert login(client, "alice", "wrong") == 429  # the limit-th failure locks
    assert login(client, "alice", alice["password"]) == 429  # the right password too
    assert "_auth_user_id" not in client.session
    # Another address, and another user, are not locked out.
    assert login(Client(REMOTE_ADDR="198.51.100.8"), "alice", alice["password"]) == 302
    assert login(client, "adam", cast["adam"]["password"]) == 302
    # Sending X-Forwarded-For (no trusted proxy configured) does not escape the lockout.
    spoofed = Client(REMOTE_ADDR="198.51.100.7", HTTP_X_FORWARDED_FOR="203.0.113.1")
    assert login(spoofed, "alice", alice["password"]) == 429
    later = timezone.now() + timedelta(seconds=settings.MCPTASKS_LOGIN_LOCKOUT_S + 1)
    with time_machine.travel(later, tick=False):
        assert login(Client(REMOTE_ADDR="198.51.100.7"), "alice", alice["password"]) == 302


def test_failed_logins_are_audited_with_repeats_aggregated(cast: dict[str, Any]) -> None:
    client = Client(REMOTE_ADDR="198.51.100.20")
    for number in range(60):
        login(client, f"nobody-{number}", "guess")
    for _ in range(60):
        login(client, "alice", "wrong")
    system = AuditEvent.objects.filter(action="auth.login_failed", chain="system")
    assert list(system.order_by("seq").values_list("data__failures", flat=True)) == [1, 10]
    alices = AuditEvent.objects.filter(action="auth.login_failed", chain="tenant:acme")
    assert list(alices.order_by("seq").values_list("data__failures", flat=True)) == [1, 10]


def test_the_system_chain_takes_a_bounded_number_of_failed_logins_per_window(
    cast: dict[str, Any], settings: Any
) -> None:
    settings.MCPTASKS_LOGIN_FAILED_AUDIT_SYSTEM_MAX = 3
    for number in range(10):
        login(Client(REMOTE_ADDR=f"198.51.100.{100 + number}"), f"nobody-{number}", "guess")
    assert AuditEvent.objects.filter(action="auth.login_failed", chain="system").count() == 3


# ---------------------------------------------------------------- X-Forwarded-For
class Meta:
    def __init__(self, remote: str, forwarded: str | None = None) -> None:
        self.META = {"REMOTE_ADDR": remote}
        if forwarded is not None:
            self.META["HTTP_X_FORWARDED_FOR"] = forwarded


@pytest.mark.parametrize(
    ("trusted", "remote", "forwarded", "client"),
    [
        ([], "10.0.0.5", "6.6.6.6", "10.0.0.5"),  # default: nobody's header is believed
        (["10.0.0.5"], "192.0.2.1", "6.6.6.6", "192.0.2.1"),  # not from a trusted proxy
        (["10.0.0.5"], "10.0.0.5", "6.6.6.6", "6.6.6.6"),
        (["10.0.0.5"], "10.0.0.5", "6.6.6.6, 203.0.113.4", "203.0.113.4"),  # rightmost hop
        (["10.0.0.0/8"], "10.0.0.5", "6.6.6.6, 203.0.113.4, 10.1.1.1", "203.0.113.4"),
        (["10.0.0.5"], "10.0.0.5", "not-an-address", "10.0.0.5"),
        (["10.0.0.5"], "10.0.0.5", None, "10.0.0.5"),
    ],
)
def test_x_forwarded_for_is_believed_only_from_configured_proxies(
    settings: Any, trusted: list[str], remote: str, forwarded: str | None, client: str
) -> None:
    settings.MCPTASKS_TRUSTED_PROXIES = trusted
    assert client_ip(Meta(remote, forwarded)) == client


def test_the_audit_ip_of_a_login_ignores_a_forwarded_for_the_client_sent(
    cast: dict[str, Any], settings: Any
) -> None:
    login(Client(REMOTE_ADDR="192.0.2.10", HTTP_X_FORWARDED_FOR="6.6.6.6"), "mallory", "x")
    settings.MCPTASKS_TRUSTED_PROXIES = ["192.0.2.10"]
    login(Client(REMOTE_ADDR="192.0.2.10", HTTP_X_FORWARDED_FOR="203.0.113.9"), "eve", "x")
    events = AuditEvent.objects.filter(action="auth.login_failed").order_by("seq")
    assert [e.data["ip"] for e in events] == ["192.0.2.10", "203.0.113.9"]


# ---------------------------------------------------------------- /audit/verify
def archive(manifest: bytes, data: bytes) -> io.BytesIO:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as zipped:
        zipped.writestr("audit.jsonl.manifest.json", manifest)
        zipped.writestr("audit.jsonl", data)
    buffer.seek(0)
    buffer.name = "audit.zip"
    return buffer


def verify(client: Client, upload: io.BytesIO) -> tuple[int, str]:
    response = client.post(reverse("dashboard:audit_verify"), {"archive": upload})
    return response.status_code, re.sub(r"\s+", " ", response.content.decode())


@pytest.fixture
def carl(users: dict[str, Any]) -> Client:
    client = Client()
    client.force_login(users["carl"])
    return client


def test_verify_refuses_an_upload_over_its_size_limit_unread(carl: Client, settings: Any) -> None:
    settings.MCPTASKS_AUDIT_VERIFY_MAX_UPLOAD_BYTES = 4096
    status, page = verify(carl, archive(b"{}", os.urandom(16384)))
    assert status == 413 and "MCPTASKS_AUDIT_VERIFY_MAX_UPLOAD_BYTES" in page


def test_verify_refuses_a_zip_bomb_by_its_unpacked_size(carl: Client, settings: Any) -> None:
    settings.MCPTASKS_AUDIT_VERIFY_MAX_UNCOMPRESSED_BYTES = 8 * 1024 * 1024
    bomb = archive(json.dumps({"format": "jsonl"}).encode(), b"\n" * (16 * 1024 * 1024))
    assert len(bomb.getvalue()) < 64 * 1024
    status, page = verify(carl, bomb)
    assert status == 200 and "MCPTASKS_AUDIT_VERIFY_MAX_UNCOMPRESSED_BYTES" in page


def test_verify_refuses_a_row_longer_than_any_export_row(carl: Client) -> None:
    """One 4 MiB line without a newline is not held in memory whole: refused as not an export
    (the signature check passes first only for a signed manifest, so sign a real one)."""
    from audit.export import ExportFilters, ExportStream, dump_manifest, finish_export
    from audit.record import Actor

    stream = ExportStream(filters=ExportFilters(chain="tenant:acme"), format="jsonl")
    for _ in stream:
        pass
    manifest = finish_export(stream, actor=Actor.system("test"))
    signed = dump_manifest(manifest).encode()
    status, page = verify(carl, archive(signed, b"x" * (4 * 1024 * 1024)))
    assert status == 200 and "a row is longer than" in page


# ---------------------------------------------------------------- listen streams
def test_listen_streams_per_principal_are_capped(
    server_url: str,  # noqa: F811
    cast: dict[str, Any],
    make_task: Any,
    settings: Any,
) -> None:
    settings.MCPTASKS_MAX_LISTEN_STREAMS_PER_PRINCIPAL = 2
    task = make_task("alice")
    alice = cast["alice"]["token"]
    headers = {
        "content-type": "application/json",
        "accept": "text/event-stream",
        "mcp-protocol-version": VERSION,
        "mcp-method": "subscriptions/listen",
    }

    async def go() -> tuple[list[int], int]:
        async with httpx.AsyncClient(base_url=server_url, timeout=10) as client:

            def open_stream(token: str, n: int) -> Any:
                return client.stream(
                    "POST",
                    "/mcp",
                    json=listen_body(n, [task.pk], TASK_CAPS),
                    headers={**headers, "authorization": f"Bearer {token}"},
                )

            async with open_stream(alice, 1) as first, open_stream(alice, 2) as second:
                async with open_stream(alice, 3) as third:
                    refused = third.status_code
                    body = json.loads(await third.aread())
                assert "MCPTASKS_MAX_LISTEN_STREAMS_PER_PRINCIPAL" in body["error_description"]
                async with open_stream(cast["olga"]["token"], 4) as other:
                    other_status = other.status_code
                return [first.status_code, second.status_code, refused], other_status

    statuses, other = asyncio.run(go())
    assert statuses == [200, 200, 429] and other == 200


def test_an_idle_listen_stream_is_ended(
    server_url: str,  # noqa: F811
    cast: dict[str, Any],
    make_task: Any,
    settings: Any,
) -> None:
    settings.MCPTASKS_STREAM_IDLE_TIMEOUT_S = 0.5
    task = make_task("alice")  # queued: no notification after the first
    messages = asyncio.run(
        read_stream(
            server_url, cast["alice"]["token"], listen_body(9, [task.pk], TASK_CAPS), max_seconds=5
        )
    )
    assert [m.get("method") for m in messages[:2]] == [
        "notifications/subscriptions/acknowledged",
        "notifications/tasks",
    ]
    assert messages[-1]["id"] == 9 and messages[-1]["result"]["resultType"] == "complete"
