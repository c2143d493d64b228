"""The hub's channel-layer receive loop."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from redis.exceptions import TimeoutError as RedisTimeoutError

from mcptasks.mcp.hub import Hub


class IdleThenMessage:
    """A layer whose first receive times out as an idle channels-redis receive does under
    redis-py's 5 s socket timeout; the next one returns a broadcast."""

    def __init__(self) -> None:
        self.calls = 0

    async def receive(self, channel: str) -> dict[str, Any]:
        self.calls += 1
        if self.calls == 1:
            raise RedisTimeoutError("Timeout reading from 127.0.0.1:6379")
        if self.calls == 2:
            return {"type": "task.changed", "task_id": "t1", "version": 3}
        await asyncio.Event().wait()  # nothing more
        raise AssertionError


def test_hub_receives_again_at_once_after_an_idle_redis_timeout():
    async def go() -> float:
        local = Hub(asyncio.get_running_loop())
        local.layer, local.channel = IdleThenMessage(), "specific.test"
        notified = asyncio.Event()
        local.notify = lambda task_id, version: notified.set()  # type: ignore[method-assign]
        started = time.monotonic()
        reader = asyncio.create_task(local._read())
        try:
            await asyncio.wait_for(notified.wait(), 5)
        finally:
            reader.cancel()
        return time.monotonic() - started

    # A failed receive pauses a second before retrying; a timed-out idle one must not.
    assert asyncio.run(go()) < 0.5
