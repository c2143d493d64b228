"""A broadcast on the Redis channel layer is sent only to groups someone listens to (events.py,
issue 23): one pipelined ZCOUNT from the calling thread decides, as group_send would."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
from channels_redis.core import RedisChannelLayer

from mcptasks import events
from tests.faults import harness

pytestmark = pytest.mark.redis


@pytest.fixture
def layer(
    private_redis: harness.PrivateRedis, monkeypatch: pytest.MonkeyPatch
) -> RedisChannelLayer:
    channel_layer = RedisChannelLayer(hosts=[{"address": private_redis.url(1)}])
    monkeypatch.setattr(events, "get_channel_layer", lambda: channel_layer)
    return channel_layer


def commands(client: Any) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name: int(row["calls"]) for name, row in stats.items() if name != "cmdstat_info"}


def sent_since(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}


def test_a_change_nobody_listens_to_is_one_zcount_and_no_hand_off(
    private_redis: harness.PrivateRedis, layer: RedisChannelLayer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_loop() -> Any:
        raise AssertionError("handed to the sender loop")

    monkeypatch.setattr(events, "_sender_loop", no_loop)
    events.broadcast("t1", 7, 1, task_group=False)  # the client connects
    counter = harness.redis_client(private_redis.url(1))
    before = commands(counter)
    events.broadcast("t1", 7, 2, task_group=False)
    events.broadcast("t1", 7, 3)  # task and tenant groups: one pipeline
    assert sent_since(before, commands(counter)) == {"cmdstat_zcount": 3}


def test_a_listened_group_gets_the_change_and_the_others_nothing(
    layer: RedisChannelLayer,
) -> None:
    async def scenario() -> list[dict[str, Any]]:
        channel = await layer.new_channel()
        await layer.group_add("tenant.7", channel)
        events.broadcast("t1", 7, 4)  # tenant.7 is listened to, task.t1 is not
        received = [await asyncio.wait_for(layer.receive(channel), 5)]
        try:
            received.append(await asyncio.wait_for(layer.receive(channel), 0.5))
        except TimeoutError:
            pass
        return received

    received = asyncio.run(scenario())
    assert received == [{"type": "task.changed", "task_id": "t1", "tenant_id": 7, "version": 4}]


def test_a_member_past_the_group_expiry_is_not_listening(
    private_redis: harness.PrivateRedis, layer: RedisChannelLayer, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = layer._group_key("tenant.7")
    client = harness.redis_client(private_redis.url(1))
    client.zadd(key, {"gone!x": int(time.time()) - layer.group_expiry - 5})
    assert events._listened(layer, ["tenant.7"]) == []
    client.zadd(key, {"here!y": time.time()})
    assert events._listened(layer, ["tenant.7"]) == ["tenant.7"]


def test_a_broadcast_while_the_channel_redis_is_down_is_logged_not_raised(
    private_redis: harness.PrivateRedis, layer: RedisChannelLayer, caplog: pytest.LogCaptureFixture
) -> None:
    private_redis.stop()
    with caplog.at_level(logging.WARNING, logger="mcptasks.events"):
        events.broadcast("t1", 7, 1)
    assert [r.getMessage() for r in caplog.records] == ["broadcast failed"]
