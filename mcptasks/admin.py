"""Django admin: for superusers only, and read-only for task state (changed only through
lifecycle).

``is_staff`` means a cross-tenant operator here (access.py), not an admin user: operators and
tenant admins work in the dashboard and the administration commands (README "Administration").
The admin shows every tenant's rows, so it is for the people who run the server.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html

from audit.redact import redact_text
from mcptasks import wire
from mcptasks.models import ApiToken, Effect, InputRequest, Membership, Task, Tenant


def redacted_fields(*names: str, sensitive_of: Any = None) -> list[Any]:
    """Read-only admin fields showing ``names`` as the dashboard does: redacted (the raw
    columns are excluded). ``sensitive_of(obj)`` gives the declared sensitive names."""

    def field(name: str) -> Any:
        def show(self: Any, obj: Any) -> Any:
            value = getattr(obj, name)
            if isinstance(value, str):
                return redact_text(value)
            sensitive = sensitive_of(obj) if sensitive_of else frozenset()
            shown = json.dumps(wire.shown(value, sensitive), indent=2, ensure_ascii=False)
            return format_html("<pre>{}</pre>", shown)

        show.short_description = f"{name.replace('_', ' ')} (redacted)"  # type: ignore[attr-defined]
        show.__name__ = f"redacted_{name}"
        return show

    return [field(name) for name in names]


def _task_sensitive(obj: Any) -> frozenset[str]:
    task = obj if isinstance(obj, Task) else obj.task
    return wire.sensitive_keys_of(task.tool_name)


def _answer_sensitive(obj: Any) -> frozenset[str]:
    """An answer's secrets: the tool's names and the fields its question marks sensitive."""
    from mcptasks.queries import secret_fields

    return _task_sensitive(obj) | secret_fields(obj.params or {})


def superusers_only(request: HttpRequest) -> bool:
    user = request.user
    return bool(user.is_active and user.is_superuser)


admin.site.has_permission = superusers_only  # type: ignore[method-assign]
admin.site.site_header = "mcptasks administration (superusers)"


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "created_at")


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "tenant", "role")
    list_filter = ("role", "tenant")


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    list_display = (
        "lookup",
        "name",
        "user",
        "tenant",
        "created_at",
        "expires_at",
        "revoked_at",
        "last_used_at",
    )
    exclude = ("secret_hash",)


@admin.register(Task)
class TaskAdmin(ReadOnlyAdmin):
    list_display = ("id", "tool_name", "tenant", "principal", "state", "created_at", "version")
    list_filter = ("state", "tenant", "tool_name")
    search_fields = ("id", "backend_job_id")
    # Never shown unredacted: what the tool was given, said, asked and returned.
    _shown = ("arguments", "status_message", "result", "error", "cancel_reason", "step_log")
    exclude = _shown
    (
        redacted_arguments,
        redacted_status_message,
        redacted_result,
        redacted_error,
        redacted_cancel_reason,
        redacted_step_log,
    ) = redacted_fields(*_shown, sensitive_of=_task_sensitive)
    readonly_fields = tuple(f"redacted_{name}" for name in _shown)


@admin.register(InputRequest)
class InputRequestAdmin(ReadOnlyAdmin):
    list_display = ("task", "key", "method", "audience", "state", "answered_via")
    exclude = ("params", "response")
    (redacted_params,) = redacted_fields("params", sensitive_of=_task_sensitive)
    (redacted_response,) = redacted_fields("response", sensitive_of=_answer_sensitive)
    readonly_fields = ("redacted_params", "redacted_response")


@admin.register(Effect)
class EffectAdmin(ReadOnlyAdmin):
    list_display = ("task", "step", "state", "idempotent", "external_ref", "updated_at")
    exclude = ("result", "reconcile_note")
    redacted_result, redacted_reconcile_note = redacted_fields(
        "result", "reconcile_note", sensitive_of=_task_sensitive
    )
    readonly_fields = ("redacted_result", "redacted_reconcile_note")
