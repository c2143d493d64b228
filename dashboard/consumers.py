"""The dashboard's WebSocket: compact task updates for what the session user may see.

It joins the ``tenant.<id>`` groups of the user's tenants and forwards a change only after
the doorway (``access.task_for``, a tenant's broadcast counting against no lookup budget)
returns the task, so a member sees their own tasks and never another tenant's. The
page then fetches server-rendered fragments. Consumers never write the ORM.

Access is re-checked every ``MCPTASKS_STREAM_ACCESS_CHECK_S``: a user deactivated, or whose
memberships changed (a tenant or a role taken away, or given), has the socket closed (4403); the
page reconnects, and a new socket joins what the user may see now.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer, AsyncWebsocketConsumer
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import close_old_connections

from audit.redact import redact_text
from mcptasks import access, events, wire

log = logging.getLogger(__name__)
ACCESS_CHANGED = 4403

Grant = dict[int, frozenset[str]]


def _grant(user_pk: int) -> Grant | None:
    """What the user holds now (tenant → roles), or None when they may not be signed in."""
    try:
        if not get_user_model()._default_manager.filter(pk=user_pk, is_active=True).exists():
            return None
        return {
            tenant_id: frozenset(roles)
            for tenant_id, roles in access.roles_by_tenant(user_pk).items()
        }
    finally:
        close_old_connections()


def _update_for(user: Any, task_id: str) -> dict[str, Any] | None:
    try:
        try:
            task = access.task_for(user, task_id, lookup=False)
        except access.TaskHidden:
            return None
        return {
            "type": "task",
            "task_id": task.pk,
            "version": task.version,
            "state": task.state,
            "status": wire.viewer_status(user, task),
            # Redacted before it is cut, so a cut can never leave half a secret unrecognised.
            "status_message": redact_text(task.status_message or "")[:200],
        }
    finally:
        close_old_connections()


class TaskUpdatesConsumer(AsyncJsonWebsocketConsumer):
    groups_joined: list[str]
    watcher: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        events.remember_loop(asyncio.get_running_loop())
        grant = await sync_to_async(_grant, thread_sensitive=False)(user.pk)
        if grant is None:
            await self.close(code=4401)
            return
        self.groups_joined = [f"tenant.{tenant_id}" for tenant_id in sorted(grant)]
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        self.watcher = asyncio.create_task(self._watch(user.pk, grant))

    async def _watch(self, user_pk: int, grant: Grant) -> None:
        """Close the socket once what the user holds is no longer what it was opened with."""
        while True:
            await asyncio.sleep(settings.MCPTASKS_STREAM_ACCESS_CHECK_S)
            try:
                now = await sync_to_async(_grant, thread_sensitive=False)(user_pk)
            except Exception:
                log.warning("dashboard socket access check failed", exc_info=True)
                continue  # a database outage: checked again next time
            if now != grant:
                await self.close(code=ACCESS_CHANGED)
                return

    async def disconnect(self, code: int) -> None:
        if self.watcher is not None:
            self.watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.watcher
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data: Any = None, bytes_data: Any = None, **kwargs: Any) -> None:
        """The client sends nothing meaningful: every frame is ignored unread (a frame that is
        not JSON, or is binary, is no error)."""

    async def task_changed(self, event: dict[str, Any]) -> None:
        update = await sync_to_async(_update_for, thread_sensitive=False)(
            self.scope["user"], event["task_id"]
        )
        if update is not None:
            await self.send_json(update)


class NoSuchSocket(AsyncWebsocketConsumer):
    """A WebSocket upgrade to a path no consumer serves: closed at once (4404)."""

    async def connect(self) -> None:
        await self.close(code=4404)
