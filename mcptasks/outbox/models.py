"""Destinations of a tenant's events and the outbox of deliveries to them (issue 24, 21 §5).

Fields of :class:`Destination`:

- ``tenant``: whose events it receives; managed by the tenant's admins
  (``access.may_manage_destinations``).
- ``name``: unique within the tenant; ``kind``: a key of ``mcptasks.sinks.sinks()``.
- ``config``: the kind's non-secret settings, as its ``clean_config`` returned them.
- ``secret_encrypted``: the kind's one secret, Fernet-encrypted (``mcptasks.outbox.secrets``);
  write-only: never returned, shown, logged or audited.
- ``events``: the subscribed event types (``mcptasks.outbox.subscriptions.TASK_EVENTS``) and/or
  ``audit`` (the tenant's whole audit chain, in chain order).
- ``owner``: the principal whose view of a task the task events carry (redacted).
- ``enabled``: a disabled destination gets no new deliveries; pending ones wait.
- ``audit_cursor``: the last audit sequence of the tenant's chain taken into a delivery; the
  chain itself is the durable log of the audit stream.

Fields of :class:`Delivery` (one row per message, or per batch of audit events):

- ``event_id``: the stable id receivers de-duplicate on (a batch: its first message's);
  ``event_type``; ``task_id`` (a plain column: deliveries outlive tasks); ``ordering_key``
  (``task:<id>`` or ``audit``: rows of one key are sent one at a time, in id order).
- ``messages``: the rendered, redacted messages; ``first_seq`` / ``last_seq`` for audit batches.
- ``state`` (:class:`DeliveryState`), ``attempts`` (also the fencing token of a claim),
  ``next_attempt_at``, ``lease_owner`` / ``lease_expires_at`` (a worker's claim),
  ``last_error`` (a sink's reason, never a secret or payload), ``created_at``,
  ``delivered_at``, ``dead_at``, ``redelivered_by`` / ``redelivered_at``.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from mcptasks.task_ids import TaskIdField


class Destination(models.Model):
    tenant = models.ForeignKey(
        "mcptasks.Tenant", on_delete=models.CASCADE, related_name="destinations"
    )
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=32)
    config = models.JSONField(default=dict, blank=True)
    secret_encrypted = models.TextField(blank=True, default="")
    events = models.JSONField(default=list, blank=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    enabled = models.BooleanField(default=True)
    audit_cursor = models.BigIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        app_label = "mcptasks"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="destination_unique_name")
        ]
        indexes = [models.Index(fields=["tenant", "enabled"], name="destination_tenant_enabled")]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})@{self.tenant_id}"

    @property
    def has_secret(self) -> bool:
        return bool(self.secret_encrypted)


class DeliveryState(models.TextChoices):
    PENDING = "pending"
    DELIVERING = "delivering"
    DELIVERED = "delivered"
    DEAD = "dead"


class Delivery(models.Model):
    destination = models.ForeignKey(
        Destination, on_delete=models.CASCADE, related_name="deliveries"
    )
    tenant = models.ForeignKey("mcptasks.Tenant", on_delete=models.CASCADE, related_name="+")
    event_id = models.CharField(max_length=120)
    event_type = models.CharField(max_length=64)
    task_id = TaskIdField(max_length=64, blank=True, default="")
    ordering_key = models.CharField(max_length=80)
    messages = models.JSONField(default=list)
    first_seq = models.BigIntegerField(null=True, blank=True)
    last_seq = models.BigIntegerField(null=True, blank=True)
    state = models.CharField(
        max_length=16, choices=DeliveryState.choices, default=DeliveryState.PENDING
    )
    attempts = models.IntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    lease_owner = models.CharField(max_length=100, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)
    dead_at = models.DateTimeField(null=True, blank=True)
    redelivered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    redelivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        app_label = "mcptasks"
        constraints = [
            models.UniqueConstraint(
                fields=["destination", "event_id"], name="delivery_unique_event"
            )
        ]
        indexes = [
            models.Index(fields=["destination", "ordering_key", "id"], name="delivery_order"),
            models.Index(fields=["state", "next_attempt_at"], name="delivery_due"),
            models.Index(fields=["destination", "-id"], name="delivery_log"),
            models.Index(fields=["task_id"], name="delivery_task"),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.event_id} → {self.destination_id} ({self.state})"
