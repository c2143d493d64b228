"""Access ends when it is taken away (issue 19), on every channel.

Removing a membership or revoking a token stops that principal at its next request on MCP, the
REST API and the dashboard, and within a few seconds (``MCPTASKS_STREAM_ACCESS_CHECK_S``) on an
open ``subscriptions/listen`` stream or dashboard WebSocket.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from audit.record import Actor
from mcptasks import tokens
from mcptasks.models import ApiToken, Membership
from tests.production.test_jwt import signing  # noqa: F401
from tests.production.test_jwt import token as jwt_token
from tests.protocol.conftest import TASK_CAPS, McpClient
from tests.streams.test_dashboard_socket import connect, session_cookie
from tests.streams.test_listen import listen_body, read_stream

pytestmark = pytest.mark.django_db(transaction=True)
SUB = "io.modelcontextprotocol/subscriptionId"
CHECK_S = 0.3


@pytest.fixture(autouse=True)
def quick_checks(settings: Any) -> None:
    settings.MCPTASKS_STREAM_ACCESS_CHECK_S = CHECK_S
    settings.SECURE_SSL_REDIRECT = False


@pytest.fixture
def both_scopes(cast: dict[str, dict[str, Any]]) -> Callable[[str], tuple[ApiToken, str]]:
    """``both_scopes("alice")`` → an ``mcp`` + ``api`` token of hers, in her first tenant."""

    def issue(name: str) -> tuple[ApiToken, str]:
        entry = cast[name]
        return ApiToken.issue(user=entry["user"], tenant=entry["tenant"], scopes=["mcp", "api"])

    return issue


def rest(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def remove_membership(user: Any, tenant: Any) -> None:
    assert Membership.objects.filter(user=user, tenant=tenant).delete()[0] >= 1


def revoke(token: ApiToken) -> None:
    tokens.revoke_token(token_id=token.pk, actor=Actor.system("test"), reason="test")


# ---------------------------------------------------------------- one request
@pytest.mark.parametrize("taken", ["membership", "token"])
def test_mcp_and_rest_refuse_the_next_request(
    taken: str, cast: dict[str, Any], make_task: Any, both_scopes: Any
) -> None:
    alice = cast["alice"]
    token, secret = both_scopes("alice")
    task = make_task("alice")
    mcp, api = McpClient(secret), rest(secret)
    assert mcp.call("tasks/get", {"taskId": task.pk}).status == 200
    assert api.get(f"/api/v1/tasks/{task.pk}").status_code == 200
    assert mcp.tool("echo_task", {"message": "hi"}).status == 200

    if taken == "membership":
        remove_membership(alice["user"], alice["tenant"])
    else:
        revoke(token)

    for reply in (
        mcp.call("tasks/get", {"taskId": task.pk}),
        mcp.tool("echo_task", {"message": "hi"}),
        mcp.call("tasks/cancel", {"taskId": task.pk}),
    ):
        assert reply.status == 401, reply.body
        assert reply.body["error"] == "invalid_token"
    assert api.get(f"/api/v1/tasks/{task.pk}").status_code == 401
    assert api.get("/api/v1/tasks").status_code == 401


def test_an_owner_removed_from_the_tenant_no_longer_sees_their_tasks_on_the_dashboard(
    cast: dict[str, Any], make_task: Any
) -> None:
    alice = cast["alice"]
    task = make_task("alice")
    client = Client()
    client.force_login(alice["user"])
    assert client.get(reverse("dashboard:task", args=[task.pk])).status_code == 200
    remove_membership(alice["user"], alice["tenant"])
    assert client.get(reverse("dashboard:task", args=[task.pk])).status_code == 404
    listing = client.get(reverse("dashboard:tasks"))
    assert task.pk not in listing.content.decode()


def test_an_operator_removed_from_a_tenant_no_longer_acts_there_on_rest(
    cast: dict[str, Any], make_task: Any, both_scopes: Any
) -> None:
    """olga's token lives in acme; losing globex takes globex's tasks away at once."""
    olga = cast["olga"]
    _, secret = both_scopes("olga")
    bobs = make_task("bob")
    api = rest(secret)
    assert api.get(f"/api/v1/tasks/{bobs.pk}").status_code == 200
    remove_membership(olga["user"], bobs.tenant)
    assert api.get(f"/api/v1/tasks/{bobs.pk}").status_code == 404
    assert api.post(f"/api/v1/tasks/{bobs.pk}/force-cancel", {"reason": "x"}).status_code == 404


# ---------------------------------------------------------------- open streams
def listen_until_taken(
    server_url: str, secret: str, task_ids: list[str], take: Callable[[], None]
) -> tuple[list[dict[str, Any]], float]:
    """Open a listen stream, take access away once it is open; the messages and how long
    after the taking the stream ended."""
    taken_at: list[float] = []

    def later() -> None:
        time.sleep(0.3)
        take()
        taken_at.append(time.monotonic())

    worker = threading.Thread(target=later)
    messages = asyncio.run(
        read_stream(server_url, secret, listen_body(5, task_ids, TASK_CAPS), on_open=worker.start)
    )
    ended = time.monotonic()
    worker.join()
    return messages, ended - taken_at[0]


@pytest.mark.parametrize("taken", ["membership", "token"])
def test_listen_stream_ends_within_seconds_of_losing_access(
    taken: str, server_url: str, cast: dict[str, Any], make_task: Any
) -> None:
    alice = cast["alice"]
    task = make_task("alice")  # queued: nothing ends the stream but the taking
    token = ApiToken.objects.filter(user=alice["user"]).latest("pk")

    def take() -> None:
        if taken == "membership":
            remove_membership(alice["user"], alice["tenant"])
        else:
            revoke(token)

    messages, after = listen_until_taken(server_url, alice["token"], [task.pk], take)
    assert after < 5, after
    assert messages[0]["method"] == "notifications/subscriptions/acknowledged"
    assert [
        m["params"]["taskId"] for m in messages if m.get("method") == "notifications/tasks"
    ] == [task.pk]
    closing = messages[-1]
    assert closing["id"] == 5 and closing["result"]["_meta"][SUB] == 5


def test_listen_stream_stops_sending_a_task_whose_tenant_the_viewer_left(
    server_url: str, cast: dict[str, Any], make_task: Any
) -> None:
    """carl (auditor of acme and globex, token in acme) keeps his stream, but bob's globex
    task is no longer his to see: nothing more of it, and the stream ends as done."""
    carl = cast["carl"]
    bobs = make_task("bob")
    messages, after = listen_until_taken(
        server_url,
        carl["token"],
        [bobs.pk],
        lambda: remove_membership(carl["user"], bobs.tenant),
    )
    assert after < 5, after
    assert messages[-1]["result"]["_meta"][SUB] == 5
    assert len([m for m in messages if m.get("method") == "notifications/tasks"]) == 1


def test_dashboard_socket_closes_within_seconds_of_losing_a_membership(
    cast: dict[str, Any], users: dict[str, Any]
) -> None:
    carl = users["carl"]
    cookie = session_cookie(carl)

    async def go() -> tuple[dict[str, Any], float]:
        socket, connected = await connect(cookie)
        assert connected
        assert await socket.receive_nothing(timeout=CHECK_S * 2)  # still open
        globex = cast["bob"]["tenant"]
        await asyncio.to_thread(remove_membership, carl, globex)
        taken = time.monotonic()
        closed = await socket.receive_output(timeout=5)
        return closed, time.monotonic() - taken

    closed, after = asyncio.run(go())
    assert closed == {"type": "websocket.close", "code": 4403}
    assert after < 5, after


def test_dashboard_socket_closes_when_the_user_is_deactivated(users: dict[str, Any]) -> None:
    alice = users["alice"]
    cookie = session_cookie(alice)

    async def go() -> dict[str, Any]:
        socket, connected = await connect(cookie)
        assert connected
        alice.is_active = False
        await asyncio.to_thread(alice.save, update_fields=["is_active"])
        return await socket.receive_output(timeout=5)  # type: ignore[no-any-return]

    assert asyncio.run(go())["type"] == "websocket.close"


def test_listen_stream_opened_with_a_jwt_ends_when_the_jwt_expires(
    server_url: str,
    cast: dict[str, Any],
    make_task: Any,
    signing: Any,  # noqa: F811
) -> None:
    task = make_task("alice")
    expires = int(time.time()) + 2
    messages = asyncio.run(
        read_stream(
            server_url,
            jwt_token(signing, exp=expires),
            listen_body(6, [task.pk], TASK_CAPS),
            max_seconds=15,
        )
    )
    ended = time.time()
    assert expires <= ended < expires + 5, ended - expires
    assert messages[-1]["id"] == 6 and messages[-1]["result"]["_meta"][SUB] == 6
