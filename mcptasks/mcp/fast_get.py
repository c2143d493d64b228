"""``tasks/get`` on the event loop: the hot path of every polling client (issue 13, B1).

The common case — a bearer token's owner polling their own task that is not waiting for input —
is answered with one SQL round trip on an async psycopg pool, without leaving the event loop:
token, user and tenant (auth.token_row_plan, the general path's loader), the owner's membership of
the token's tenant and their own task there in one row
(another principal's task is not read), checked by the same functions the general path uses
(``auth.verify_token``, ``access.decide_without_queries``, ``limits.check_poll_async``,
``wire.detailed_task``). Anything else returns None and the request takes the general path on a
worker thread, which gives every error and every other decision: JWTs, unknown or foreign task
ids (alike: no task in the row), role or delegation rights, tasks awaiting input, a token whose
last use is due to be recorded, a token whose owner left its tenant, or a row this connection
cannot see.

PostgreSQL only, and only under a server process (one long-lived event loop, which the pool
belongs to); ``MCPTASKS_FAST_TASKS_GET`` turns it off.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from django.conf import settings
from django.db import connections
from django.utils import timezone

from mcptasks import access, limits, metrics, wire
from mcptasks.auth import (
    MCP_SCOPE,
    AuthError,
    RowFields,
    TokenRowPlan,
    token_row_plan,
    verify_token,
)
from mcptasks.mcp.handlers import gate
from mcptasks.models import ApiToken, TaskState
from mcptasks.protocol.call import Call

log = logging.getLogger(__name__)


# What the answer reads of the row (the other fields deferred): the token's checks, whether its
# user is active, and the task's wire fields.
FIELDS = RowFields(
    token=frozenset(
        {"id", "user_id", "tenant_id", "secret_hash", "scopes", "expires_at", "revoked_at"}
        | {"last_used_at"}
    ),
    user=frozenset({"id", "is_active"}),
    tenant=frozenset({"id"}),
    task=frozenset(
        {
            "id",
            "tenant_id",
            "principal_id",
            "state",
            "status_message",
            "result",
            "error",
            "ttl_ms",
            "poll_interval_ms",
            "created_at",
            "updated_at",
            "version",
        }
    ),
)


def plan() -> TokenRowPlan:
    """auth's token row, with the owner's membership and task joined to it."""
    return token_row_plan("default", FIELDS)


class _Pool:
    """One async connection pool per process, bound to the server's event loop."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pool: Any = None
        self.statement = ""

    async def get(self) -> Any:
        loop = asyncio.get_running_loop()
        if self.loop is not loop:
            from psycopg_pool import AsyncConnectionPool

            params = connection_params()
            configure = _utc if settings.MCPTASKS_DB_POOLER else None
            self.statement = plan().statement
            self.loop = loop
            self.pool = AsyncConnectionPool(
                kwargs=params,
                min_size=1,
                max_size=settings.MCPTASKS_FAST_TASKS_GET_POOL_MAX,
                configure=configure,
                timeout=10,
                open=False,
                name="mcptasks-fast-get",
            )
            await self.pool.open(wait=False)
        return self.pool


def connection_params() -> dict[str, Any]:
    """The pool's connection parameters: the ORM's, adapted to one autocommitted statement."""
    params = dict(connections["default"].get_connection_params())
    # Django's adapters (its "context": JSON as text, as the ORM's converters expect) serve
    # async connections as well; its cursor class does not.
    params.pop("cursor_factory", None)
    # The wire timestamps are UTC ("Z"), like the ORM's: asked for at connect, or behind a pooler
    # (PgBouncer refuses the options startup parameter) set once per connection (_utc) —
    # TimeZone is one of the parameters PgBouncer tracks and restores per client.
    behind_pooler = bool(settings.MCPTASKS_DB_POOLER)
    if not behind_pooler:
        params["options"] = f"{params.get('options', '')} -c TimeZone=UTC".strip()
    params["autocommit"] = True  # one statement: no BEGIN/COMMIT round trips
    if settings.MCPTASKS_FAST_TASKS_GET_PREPARE:
        # The one statement is prepared on each connection once (server-side), so PostgreSQL
        # stops planning the three-table join on every poll — on its generic plan, which prunes
        # the task partitions as it runs: left to choose, PostgreSQL costs it as reading every
        # partition and plans each poll afresh (0.4 ms of its CPU, against 0.14 ms;
        # mcptasks.plans.generic_plans). Not behind a pooler: it refuses the option, and a SET
        # would stay on a server connection that other clients share.
        params["prepare_threshold"] = 0
        if not behind_pooler:
            params["options"] += " -c plan_cache_mode=force_generic_plan"
    return params


async def _utc(connection: Any) -> None:
    if connection.info.parameter_status("TimeZone") != "UTC":
        await connection.execute("SET TIME ZONE 'UTC'")


_pool = _Pool()


def enabled() -> bool:
    return bool(settings.MCPTASKS_FAST_TASKS_GET) and _on_postgresql()


@functools.cache
def _on_postgresql() -> bool:
    return connections["default"].vendor == "postgresql"


async def _read(lookup: str, task_id: str) -> tuple[Any, ...] | None:
    """The row, or None — also when this pool cannot reach the database: the general path then
    answers (or reports the outage) with the ORM's connection."""
    import psycopg
    from psycopg_pool import PoolTimeout

    try:
        pool = await _pool.get()
        async with pool.connection() as connection:
            cursor = await connection.execute(_pool.statement, plan().params(lookup, task_id))
            return await cursor.fetchone()  # type: ignore[no-any-return]
    except (psycopg.Error, PoolTimeout):
        log.warning("fast tasks/get unavailable; answering on the general path", exc_info=True)
        return None


async def tasks_get(call: Call, authorization: str | None) -> dict[str, Any] | None:
    """The ``tasks/get`` result, or None when the general path must answer."""
    kind, _, credential = (authorization or "").partition(" ")
    parts = ApiToken.split(credential.strip()) if kind.lower() == "bearer" else None
    task_id = call.params.get("taskId")
    if parts is None or not isinstance(task_id, str) or not task_id or len(task_id) > 64:
        return None
    with metrics.TASKS_GET_SECONDS.time():
        row = await _read(parts[0], task_id)
        found = plan().objects(row) if row is not None else None
        if found is None or found.task is None:
            return None
        token, task, member = found.token, found.task, found.member
        user = token.user
        try:
            verify_token(token, parts[1], MCP_SCOPE)
        except AuthError:
            return None
        if not member or token.touch_due(timezone.now()) or task.state == TaskState.AWAITING_INPUT:
            return None  # the general path refuses a former member's token (401)
        # The statement read the task only in the token's tenant, whose membership it read.
        decision = access.decide_without_queries(user, access.Action.VIEW, task, member=True)
        if decision is not access.ALLOW:
            return None
        gate(call.method, call.params, call.capabilities)
        await limits.check_poll_async(
            principal_id=user.pk,
            task_id=task.pk,
            poll_interval_ms=task.poll_interval_ms,
            version=task.version,
        )
        metrics.TASKS_GET_FAST.inc()
        # Only the task's own principal takes this path (decide_without_queries above).
        return {"resultType": "complete", **wire.detailed_task(task, [], owner_view=True)}
