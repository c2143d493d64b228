"""Rate limits as token buckets: in process on the embedded default, in Redis in production
(shared by every web process). One interface, the same arithmetic in both."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
import time
import weakref
from functools import lru_cache
from typing import Any

from django.conf import settings

security_log = logging.getLogger("mcptasks.security")

# KEYS[1] bucket; ARGV: now (s), rate (tokens/s), burst, version ("" = none), ttl (s), want
# (tokens to take at most, at least one). Returns the seconds to wait (0 = allowed) and the
# tokens taken (0 when refused, or when allowed for free): a new version (a state change the
# caller has not seen) is always allowed without spending a token.
_LUA = """
local now = tonumber(ARGV[1]); local rate = tonumber(ARGV[2]); local burst = tonumber(ARGV[3])
local version = ARGV[4]; local ttl = tonumber(ARGV[5]); local want = tonumber(ARGV[6]) or 1
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts', 'version')
local tokens = tonumber(state[1]) or burst
local ts = tonumber(state[2]) or now
tokens = math.min(burst, tokens + (now - ts) * rate)
local wait = 0
local taken = 0
if version ~= '' and version ~= state[3] then
  redis.call('HSET', KEYS[1], 'version', version)
elseif tokens >= 1 then
  taken = math.max(1, math.min(want, math.floor(tokens)))
  tokens = tokens - taken
else
  wait = (1 - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('EXPIRE', KEYS[1], ttl)
return {tostring(wait), taken}
"""


class MemoryBuckets:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float, str]] = {}
        self._windows: dict[str, tuple[float, int]] = {}

    def take(self, key: str, rate: float, burst: float, version: str = "", lease: int = 1) -> float:
        """Spend a token of bucket ``key``; return the seconds to wait (0: allowed). ``lease``
        matters only to :class:`RedisBuckets` (this bucket is the process's own already)."""
        now = time.monotonic()
        with self._lock:
            tokens, stamp, seen = self._buckets.get(key, (burst, now, ""))
            tokens = min(burst, tokens + (now - stamp) * rate)
            wait = 0.0
            if version and version != seen:
                seen = version
            elif tokens >= 1:
                tokens -= 1
            else:
                wait = (1 - tokens) / rate
            if len(self._buckets) > 100_000:
                self._buckets.clear()  # bounded memory; a reset only forgives
            self._buckets[key] = (tokens, now, seen)
        return wait

    async def take_async(
        self, key: str, rate: float, burst: float, version: str = "", lease: int = 1
    ) -> float:
        return self.take(key, rate, burst, version)

    def count(self, key: str, window_s: float) -> int:
        """Count one more event of ``key`` in its window (which starts at its first event and
        lasts ``window_s``); returns the count so far, this one included."""
        now = time.monotonic()
        with self._lock:
            started, counted = self._windows.get(key, (now, 0))
            if now - started >= window_s:
                started, counted = now, 0
            if len(self._windows) > 100_000:
                self._windows.clear()  # bounded memory; a reset only forgives
            self._windows[key] = (started, counted + 1)
        return counted + 1

    def reset(self) -> None:
        with self._lock:
            self._buckets.clear()
            self._windows.clear()


class Stock:
    """Tokens this process took from shared buckets ahead of use (a bucket's *lease*), each
    bucket's spent one by one without a round trip.

    A lease of ``n`` tokens is kept for ``n / rate`` seconds, the time the shared bucket takes
    to earn them back, and only for the version the bucket had recorded: so a principal never
    gets more than one bucket allows (its burst, then its rate), whichever processes answer
    it. What a lease leaves unspent is lost, which only ever refuses sooner: a client that
    alternates between web processes may meet the limit before its burst is spent.
    """

    LIMIT = 100_000  # buckets held at once; past it all are dropped (bounded memory)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, tuple[int, str, float]] = {}  # tokens, version, until (monotonic)
        _stocks.add(self)

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._held = {}

    def spend(self, key: str, version: str) -> bool:
        """Spend one held token of ``key`` seen at ``version``; False if none is held."""
        with self._lock:
            held = self._held.get(key)
            if held is None:
                return False
            tokens, seen, until = held
            if seen != version or time.monotonic() >= until:
                del self._held[key]
                return False
            if tokens > 1:
                self._held[key] = (tokens - 1, seen, until)
            else:
                del self._held[key]
            return True

    def keep(self, key: str, version: str, taken: int, rate: float) -> None:
        """Hold what a lease of ``taken`` tokens leaves after this request spent one."""
        if taken <= 1:
            return
        until = time.monotonic() + taken / rate
        with self._lock:
            tokens, seen, earlier = self._held.get(key, (0, version, until))
            if seen != version:
                tokens, earlier = 0, until
            if len(self._held) >= self.LIMIT:
                self._held.clear()
            # Tokens of an earlier lease never outlive their own window.
            self._held[key] = (tokens + taken - 1, version, min(earlier, until))

    def clear(self) -> None:
        with self._lock:
            self._held.clear()


_stocks: weakref.WeakSet[Stock] = weakref.WeakSet()


def _forget_stocks() -> None:
    """A forked child holds nothing its parent took (nor a lock a parent thread held)."""
    for stock in list(_stocks):
        stock._forget()


os.register_at_fork(after_in_child=_forget_stocks)


class RedisBuckets:
    def __init__(self, url: str) -> None:
        import redis

        self._url = url
        self._client = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
        self._script = self._client.register_script(_LUA)
        self._async_lines: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
            weakref.WeakKeyDictionary()
        )
        self._stock = Stock()

    def take(self, key: str, rate: float, burst: float, version: str = "", lease: int = 1) -> float:
        """:meth:`MemoryBuckets.take`, shared by every web process. With ``lease`` above one,
        up to that many tokens are taken at once and the rest spent here (:class:`Stock`)."""
        if lease > 1 and self._stock.spend(key, version):
            return 0.0
        try:
            result: Any = self._script(**self._script_args(key, rate, burst, version, lease))
        except Exception:
            security_log.warning("rate limiter unavailable; allowing the request", exc_info=True)
            return 0.0
        return self._settle(key, version, rate, result)

    async def take_async(
        self, key: str, rate: float, burst: float, version: str = "", lease: int = 1
    ) -> float:
        """``take`` from an event loop (the fast ``tasks/get``): one connection of that loop's
        own, used one command at a time — without the client's pool and retry machinery, which
        cost more than the round trip."""
        if lease > 1 and self._stock.spend(key, version):
            return 0.0
        loop = asyncio.get_running_loop()
        line = self._async_lines.get(loop)
        if line is None:
            import redis.asyncio

            client = redis.asyncio.Redis.from_url(
                self._url, socket_timeout=0.5, socket_connect_timeout=0.5
            )
            line = self._async_lines[loop] = (
                client.connection_pool.make_connection(),
                asyncio.Lock(),
            )
        connection, lock = line
        args = self._script_args(key, rate, burst, version, lease)
        try:
            async with lock:
                result: Any = await self._evalsha(connection, args)
        except Exception:
            await connection.disconnect()  # the next command reconnects
            security_log.warning("rate limiter unavailable; allowing the request", exc_info=True)
            return 0.0
        return self._settle(key, version, rate, result)

    def _settle(self, key: str, version: str, rate: float, result: Any) -> float:
        """The script's answer: the wait; a lease's tokens beyond this request's are held."""
        wait, taken = float(result[0]), int(result[1])
        self._stock.keep(key, version, taken, rate)
        return wait

    async def _evalsha(self, connection: Any, args: dict[str, Any]) -> Any:
        from redis.exceptions import NoScriptError

        command = (1, *args["keys"], *args["args"])
        await connection.send_command("EVALSHA", self._script.sha, *command)
        try:
            return await connection.read_response()
        except NoScriptError:  # a restarted Redis: the script is sent once more
            await connection.send_command("EVAL", _LUA, *command)
            return await connection.read_response()

    def count(self, key: str, window_s: float) -> int:
        """:meth:`MemoryBuckets.count`, shared by every web process (0 when Redis is down)."""
        name = f"mcptasks:rl:count:{key}"
        try:
            pipe = self._client.pipeline()
            pipe.set(name, 0, ex=max(1, math.ceil(window_s)), nx=True)
            pipe.incr(name)
            return int(pipe.execute()[1])
        except Exception:
            security_log.warning("rate limiter unavailable; not counting", exc_info=True)
            return 0

    @staticmethod
    def _script_args(
        key: str, rate: float, burst: float, version: str, lease: int = 1
    ) -> dict[str, Any]:
        ttl = max(60, math.ceil(burst / rate) * 2)
        return {
            "keys": [f"mcptasks:rl:{key}"],
            "args": [time.time(), rate, burst, version, ttl, max(lease, 1)],
        }

    def reset(self) -> None:
        self._stock.clear()
        for key in self._client.scan_iter("mcptasks:rl:*"):
            self._client.delete(key)


@lru_cache(maxsize=1)
def buckets() -> MemoryBuckets | RedisBuckets:
    url = settings.MCPTASKS_LIMITS_REDIS_URL
    return RedisBuckets(url) if url else MemoryBuckets()


class Throttled(Exception):
    """Answer HTTP 429 with ``Retry-After``."""

    def __init__(self, retry_after: float, message: str, kind: str = "poll") -> None:
        super().__init__(message)
        self.kind = kind
        self.retry_after = max(1, math.ceil(retry_after))
        self.message = message


def check_poll(*, principal_id: int, task_id: str, poll_interval_ms: int, version: int) -> None:
    """``tasks/get`` faster than ``pollIntervalMs`` beyond the burst allowance → Throttled.

    The first poll after a state change is never throttled.
    """
    key, rate = _poll_bucket(principal_id, task_id, poll_interval_ms)
    wait = buckets().take(
        key, rate, settings.MCPTASKS_POLL_BURST, version=str(version), lease=_poll_lease()
    )
    _refuse_poll(wait, poll_interval_ms)


async def check_poll_async(
    *, principal_id: int, task_id: str, poll_interval_ms: int, version: int
) -> None:
    """:func:`check_poll` from the event loop (the fast ``tasks/get`` path)."""
    key, rate = _poll_bucket(principal_id, task_id, poll_interval_ms)
    wait = await buckets().take_async(
        key, rate, settings.MCPTASKS_POLL_BURST, version=str(version), lease=_poll_lease()
    )
    _refuse_poll(wait, poll_interval_ms)


def _poll_lease() -> int:
    return max(1, settings.MCPTASKS_POLL_LEASE)


def _poll_bucket(principal_id: int, task_id: str, poll_interval_ms: int) -> tuple[str, float]:
    return f"poll:{principal_id}:{task_id}", 1000.0 / max(poll_interval_ms, 1)


def _refuse_poll(wait: float, poll_interval_ms: int) -> None:
    if wait > 0:
        raise Throttled(
            wait,
            f"Polling faster than pollIntervalMs ({poll_interval_ms} ms); "
            f"retry after {math.ceil(wait)} s",
        )


def check_unknown_lookup(*, principal_id: int, task_id: str) -> None:
    """Count a lookup of a task id the principal cannot see — on MCP ``tasks/*``, the REST API
    and the dashboard alike (one budget per user); beyond the budget the principal is
    throttled and a security event is logged (other principals are unaffected)."""
    wait = buckets().take(
        f"unknown:{principal_id}",
        settings.MCPTASKS_UNKNOWN_TASK_RATE,
        settings.MCPTASKS_UNKNOWN_TASK_BURST,
    )
    if wait > 0:
        security_log.warning(
            "task id guessing throttled",
            extra={
                "event": "security.task_id_guessing",
                "principal_id": principal_id,
                "task_id_prefix": task_id[:6],
            },
        )
        raise Throttled(
            wait, "Too many lookups of unknown task ids; retry later", kind="unknown_task"
        )


class ThrottledMiddleware:
    """A ``Throttled`` raised by a Django view (the dashboard) answers 429 with
    ``Retry-After`` and the reason, instead of a server error. (The REST API's exception handler
    and ``/mcp`` answer it themselves.)"""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        return self.get_response(request)

    def process_exception(self, request: Any, exception: Exception) -> Any:
        if not isinstance(exception, Throttled):
            return None
        from django.http import HttpResponse

        from mcptasks import metrics

        metrics.THROTTLED.labels(kind=exception.kind).inc()
        response = HttpResponse(
            exception.message, status=429, content_type="text/plain; charset=utf-8"
        )
        response["Retry-After"] = str(exception.retry_after)
        return response
