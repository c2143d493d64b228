"""What a task did downstream: effects (intended, applied, unknown, reconciled by an operator)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

from mcptasks.models.principals import Tenant
from mcptasks.models.tasks import Task


class EffectState(models.TextChoices):
    INTENDED = "intended"
    APPLIED = "applied"
    FAILED = "failed"
    UNKNOWN = "unknown"
    RECONCILED_APPLIED = "reconciled_applied"
    RECONCILED_NOT_APPLIED = "reconciled_not_applied"


class Effect(models.Model):
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="effects")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    step = models.CharField(max_length=200)
    idempotency_key = models.CharField(max_length=200)
    idempotent = models.BooleanField(default=False)
    state = models.CharField(max_length=32, choices=EffectState.choices)
    external_ref = models.CharField(max_length=500, blank=True, default="")
    result = models.JSONField(null=True, blank=True)
    attempt = models.IntegerField(default=0)
    # When the lease of the attempt that left the effect unconfirmed ran (or runs) out: until
    # then plus MCPTASKS_RECONCILE_MARGIN_S that attempt may still be alive and call downstream,
    # so "not applied" cannot be recorded. Set when the attempt loses the task.
    holder_lease_expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    reconciled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reconcile_note = models.TextField(blank=True, default="")
    reconciled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "step"], name="effect_unique_step")]
        indexes = [models.Index(fields=["tenant", "state"], name="effect_tenant_state")]

    @property
    def not_applied_from(self) -> datetime | None:
        """When "not applied" may be recorded: the attempt that left the effect is presumed
        dead (its lease ran out MCPTASKS_RECONCILE_MARGIN_S ago). None: it may be now."""
        if self.holder_lease_expires_at is None:
            return None
        return self.holder_lease_expires_at + timedelta(
            seconds=settings.MCPTASKS_RECONCILE_MARGIN_S
        )

    @property
    def not_applied_refused(self) -> bool:
        """Is "not applied" still refused (the attempt that left it may be alive)?"""
        after = self.not_applied_from
        return after is not None and after > timezone.now()
