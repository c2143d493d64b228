"""``{% task_notifications task as rows %}``: the deliveries of a task's events (the task
page's Notifications section): destination, event, state, attempts — never a payload."""

from __future__ import annotations

from typing import Any

from django import template

from mcptasks.models import Delivery

register = template.Library()
SHOWN = 50


@register.simple_tag
def task_notifications(task: Any) -> list[Delivery]:
    return list(
        Delivery.objects.filter(task_id=task.pk, tenant_id=task.tenant_id)
        .select_related("destination")
        .only(
            "event_type",
            "state",
            "attempts",
            "created_at",
            "delivered_at",
            "last_error",
            "destination__name",
            "destination__kind",
        )
        .order_by("-id")[:SHOWN]
    )
