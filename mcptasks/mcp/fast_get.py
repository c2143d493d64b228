"""``tasks/get`` on the event loop: the hot path of every polling client (issue 13, B1).

The common case — a bearer token's owner polling their own task that is not waiting for input —
is answered with one SQL round trip on an async psycopg pool, without leaving the event loop:
token, user, the owner's membership of the token's tenant and their own task there in one row
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
from django.contrib.auth import get_user_model
from django.db import connections
from django.db.models.base import ModelState
from django.utils import timezone

from mcptasks import access, limits, metrics, wire
from mcptasks.auth import MCP_SCOPE, AuthError, verify_token
from mcptasks.mcp.handlers import gate
from mcptasks.models import ApiToken, Membership, Task, TaskState
from mcptasks.protocol.call import Call

log = logging.getLogger(__name__)


def _in_model_order(model: Any, names: set[str]) -> tuple[str, ...]:
    """Attribute names in the model's field order (what ``Model.from_db`` expects)."""
    return tuple(f.attname for f in model._meta.concrete_fields if f.attname in names)


TOKEN_FIELDS = _in_model_order(
    ApiToken,
    {"id", "user_id", "tenant_id", "secret_hash", "scopes", "expires_at", "revoked_at"}
    | {"last_used_at"},
)
TASK_FIELDS = _in_model_order(
    Task,
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
    },
)


def _columns(model: Any, alias: str, names: tuple[str, ...]) -> list[str]:
    return [f'{alias}."{model._meta.get_field(name.removesuffix("_id")).column}"' for name in names]


def _statement() -> str:
    user_model = get_user_model()
    token_table, task_table = ApiToken._meta.db_table, Task._meta.db_table
    user_pk = user_model._meta.pk.column  # type: ignore[union-attr]
    # Is the token's owner still a member of its tenant (a token acts only while they are)?
    member = (
        f'EXISTS (SELECT 1 FROM "{Membership._meta.db_table}" m '  # noqa: S608
        f'WHERE m."user_id" = t."user_id" AND m."tenant_id" = t."tenant_id")'
    )
    columns = [
        *_columns(ApiToken, "t", TOKEN_FIELDS),
        f'u."{user_model._meta.get_field("is_active").column}"',
        member,
        *_columns(Task, "k", TASK_FIELDS),
    ]
    # Identifiers come from model metadata; the values are bound parameters.
    return (
        f"SELECT {', '.join(columns)} "  # noqa: S608
        f'FROM "{token_table}" t '
        f'JOIN "{user_model._meta.db_table}" u ON u."{user_pk}" = t."user_id" '
        # Only the token owner's own task in the token's tenant is read: a foreign task's row
        # is never fetched, so "not yours" and "not there" cost this statement the same.
        f'LEFT JOIN "{task_table}" k ON k."id" = %(task)s '
        f'AND k."principal_id" = t."user_id" AND k."tenant_id" = t."tenant_id" '
        f'WHERE t."lookup" = %(lookup)s'
    )


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

            params = dict(connections["default"].get_connection_params())
            for key in ("cursor_factory", "context"):
                params.pop(key, None)
            # The wire timestamps are UTC ("Z"), like the ORM's.
            params["options"] = f"{params.get('options', '')} -c TimeZone=UTC".strip()
            params["autocommit"] = True  # one statement: no BEGIN/COMMIT round trips
            if settings.MCPTASKS_FAST_TASKS_GET_PREPARE:
                # The one statement is prepared on each connection once (server-side), so
                # PostgreSQL stops planning the three-table join on every poll.
                params["prepare_threshold"] = 0
            self.statement = _statement()
            self.loop = loop
            self.pool = AsyncConnectionPool(
                kwargs=params,
                min_size=1,
                max_size=settings.MCPTASKS_FAST_TASKS_GET_POOL_MAX,
                timeout=10,
                open=False,
                name="mcptasks-fast-get",
            )
            await self.pool.open(wait=False)
        return self.pool


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
            cursor = await connection.execute(_pool.statement, {"lookup": lookup, "task": task_id})
            return await cursor.fetchone()  # type: ignore[no-any-return]
    except (psycopg.Error, PoolTimeout):
        log.warning("fast tasks/get unavailable; answering on the general path", exc_info=True)
        return None


def _objects(row: tuple[Any, ...]) -> tuple[ApiToken, Any, Task, bool] | None:
    """Token (with its user), task, and whether the token's owner is a member of the token's
    tenant, from the row; None if the row has no task."""
    n = len(TOKEN_FIELDS)
    task_values = row[n + 2 :]
    if task_values[0] is None:
        return None
    token = _instance(ApiToken, TOKEN_FIELDS, row[:n])
    user = _instance(get_user_model(), ("id", "is_active"), (token.user_id, row[n]))
    token.user = user
    return token, user, _instance(Task, TASK_FIELDS, task_values), bool(row[n + 1])


def _instance(model: Any, names: tuple[str, ...], values: Any) -> Any:
    """What ``model.from_db`` builds from these columns (the others deferred), without its
    pass over every field of the model."""
    instance = model.__new__(model)
    instance._state = ModelState()
    instance._state.adding, instance._state.db = False, "default"
    instance.__dict__.update(zip(names, values, strict=True))
    return instance


async def tasks_get(call: Call, authorization: str | None) -> dict[str, Any] | None:
    """The ``tasks/get`` result, or None when the general path must answer."""
    kind, _, credential = (authorization or "").partition(" ")
    parts = ApiToken.split(credential.strip()) if kind.lower() == "bearer" else None
    task_id = call.params.get("taskId")
    if parts is None or not isinstance(task_id, str) or not task_id or len(task_id) > 64:
        return None
    with metrics.TASKS_GET_SECONDS.time():
        row = await _read(parts[0], task_id)
        found = _objects(row) if row is not None else None
        if found is None:
            return None
        token, user, task, member = found
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
