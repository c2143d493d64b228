"""The dashboard's WebSocket: compact task updates for what the session user may see.

It joins the ``tenant.<id>`` groups of the user's tenants and forwards a change only after
``access.can(VIEW)`` says yes, so a member sees their own tasks and never another tenant's. The
page then fetches server-rendered fragments. Consumers never write the ORM.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer, AsyncWebsocketConsumer
from django.db import close_old_connections

from audit.redact import redact_text
from mcptasks import access, events
from mcptasks.models import Task, TaskState, Tenant
from mcptasks.wire import WIRE_STATUS


def _tenant_ids(user: Any) -> list[int]:
    try:
        if access.is_cross_tenant_operator(user):
            return list(Tenant.objects.values_list("pk", flat=True))
        return list(access.roles_by_tenant(user))
    finally:
        close_old_connections()


def _update_for(user: Any, task_id: str) -> dict[str, Any] | None:
    try:
        task = Task.objects.filter(pk=task_id).first()
        if task is None or not access.can(user, access.Action.VIEW, task):
            return None
        return {
            "type": "task",
            "task_id": task.pk,
            "version": task.version,
            "state": task.state,
            "status": WIRE_STATUS[TaskState(task.state)],
            # Redacted before it is cut, so a cut can never leave half a secret unrecognised.
            "status_message": redact_text(task.status_message or "")[:200],
        }
    finally:
        close_old_connections()


class TaskUpdatesConsumer(AsyncJsonWebsocketConsumer):
    groups_joined: list[str]

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        import asyncio

        events.remember_loop(asyncio.get_running_loop())
        tenant_ids = await sync_to_async(_tenant_ids, thread_sensitive=False)(user)
        self.groups_joined = [f"tenant.{tenant_id}" for tenant_id in tenant_ids]
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
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
