from __future__ import annotations

from django.contrib import admin

from audit.models import AuditEvent, ChainHead, RetentionCheckpoint, RetentionPolicy
from mcptasks.admin import ReadOnlyAdmin


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("chain", "seq", "created_at", "action", "actor_display", "task_id")
    list_filter = ("action", "chain")


@admin.register(ChainHead)
class ChainHeadAdmin(ReadOnlyAdmin):
    list_display = ("chain", "seq", "hash", "updated_at")


@admin.register(RetentionPolicy)
class RetentionPolicyAdmin(admin.ModelAdmin):
    """Editable: how long each tenant keeps its audit events (applied daily)."""


@admin.register(RetentionCheckpoint)
class RetentionCheckpointAdmin(ReadOnlyAdmin):
    list_display = ("chain", "seq", "hash")
