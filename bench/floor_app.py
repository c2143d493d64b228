"""The floor: a bare ASGI app doing one primary-key SELECT (or one INSERT) per request with a
psycopg async pool. Served by the same server software as mcptasks in the same run."""

from __future__ import annotations

import json
import os
import secrets
from typing import Any

from psycopg_pool import AsyncConnectionPool

DSN = os.environ["FLOOR_DSN"]
pool = AsyncConnectionPool(DSN, min_size=4, max_size=20, open=False)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    if pool.closed:
        await pool.open()
    async with pool.connection() as connection:
        if scope["path"] == "/insert":
            await connection.execute(
                "INSERT INTO bench_floor (id, payload) VALUES (%s, %s)",
                (secrets.token_urlsafe(24), json.dumps({"tool": "echo_task"})),
            )
            body = b'{"ok":true}'
        else:
            row = await (
                await connection.execute(
                    "SELECT id, state, version, status_message FROM mcptasks_task WHERE id = %s",
                    (os.environ["FLOOR_TASK_ID"],),
                )
            ).fetchone()
            body = json.dumps(
                {"id": row[0], "state": row[1], "version": row[2], "message": row[3]}
            ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})
