"""The dashboard WebSocket: session-authenticated, filtered through access.py."""

from __future__ import annotations

import asyncio

import pytest
from channels.testing import WebsocketCommunicator
from django.test import Client

from audit.record import Actor
from mcptasks import events, lifecycle

pytestmark = pytest.mark.django_db(transaction=True)


def session_cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def connect(cookie: bytes | None) -> tuple[WebsocketCommunicator, bool]:
    from mcptasks.asgi import application

    headers = [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")]
    if cookie:
        headers.append((b"cookie", cookie))
    communicator = WebsocketCommunicator(application, "/ws/tasks", headers=headers)
    connected, _ = await communicator.connect()
    return communicator, connected


def test_dashboard_socket_rejects_anonymous(cast):
    async def go() -> bool:
        communicator, connected = await connect(None)
        await communicator.disconnect()
        return connected

    assert asyncio.run(go()) is False


def test_dashboard_socket_delivers_own_tenant_only(cast, users, make_task):
    cookies = {name: session_cookie(users[name]) for name in ("alice", "olga")}

    async def go() -> tuple[list[dict], set[str], str, str]:
        alice_ws, _ = await connect(cookies["alice"])
        olga_ws, _ = await connect(cookies["olga"])
        events.remember_loop(asyncio.get_running_loop())
        foreign = await asyncio.to_thread(make_task, "bob")
        mine = await asyncio.to_thread(make_task, "alice")
        await asyncio.to_thread(
            lifecycle.task_request_cancel, task_id=foreign.pk, actor=Actor.system()
        )
        to_alice = [await alice_ws.receive_json_from(timeout=5)]
        assert await alice_ws.receive_nothing(timeout=0.5)
        to_olga = {(await olga_ws.receive_json_from(timeout=5))["task_id"] for _ in range(3)}
        await alice_ws.disconnect()
        await olga_ws.disconnect()
        return to_alice, to_olga, foreign.pk, mine.pk

    to_alice, to_olga, foreign_id, mine_id = asyncio.run(go())
    assert [u["task_id"] for u in to_alice] == [mine_id]
    assert to_alice[0]["status"] == "working"
    assert to_olga == {foreign_id, mine_id}


@pytest.mark.parametrize("path", ["/ws/nope", "/mcp", "/", "/ws/tasks/extra", "/ws/tasks%00"])
def test_upgrades_to_unknown_paths_are_closed_cleanly(cast, users, path):
    """A routing exception before: now a close frame (4404), for anonymous and signed-in."""
    from mcptasks.asgi import application

    cookie = session_cookie(users["alice"])

    async def go(with_cookie: bool) -> tuple[bool, int | None]:
        headers = [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")]
        if with_cookie:
            headers.append((b"cookie", cookie))
        communicator = WebsocketCommunicator(application, path, headers=headers)
        connected, code = await communicator.connect(timeout=5)
        await communicator.disconnect(timeout=5)  # re-raises what the application raised
        return connected, code

    assert asyncio.run(go(True)) == (False, 4404)
    assert asyncio.run(go(False)) == (False, 4404)


def test_frames_from_the_client_are_ignored_whatever_they_hold(cast, users, make_task):
    cookie = session_cookie(users["alice"])

    async def go() -> dict:
        ws, connected = await connect(cookie)
        assert connected
        events.remember_loop(asyncio.get_running_loop())
        for frame in ("not json", "[" * 5000, '{"type": "task.changed", "task_id": "x\\u0000"}'):
            await ws.send_to(text_data=frame)
        await ws.send_to(bytes_data=b"\x00\xff")
        assert await ws.receive_nothing(timeout=0.3)
        mine = await asyncio.to_thread(make_task, "alice")  # the socket still delivers
        update = await ws.receive_json_from(timeout=5)
        await ws.disconnect()
        return {"update": update, "mine": mine.pk}

    result = asyncio.run(go())
    assert result["update"]["task_id"] == result["mine"]
