"""Django admin: for superusers only, and read-only for task state (changed only through
lifecycle).

``is_staff`` means a cross-tenant operator here (access.py), not an admin user: operators and
tenant admins work in the dashboard and the administration commands (README "Administration").
The admin shows every tenant's rows, so it is for the people who run the server.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from mcptasks.models import ApiToken, Effect, InputRequest, Membership, Task, Tenant


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
    exclude = ("arguments",)  # never shown unredacted


@admin.register(InputRequest)
class InputRequestAdmin(ReadOnlyAdmin):
    list_display = ("task", "key", "method", "audience", "state", "answered_via")
    exclude = ("response",)


@admin.register(Effect)
class EffectAdmin(ReadOnlyAdmin):
    list_display = ("task", "step", "state", "idempotent", "external_ref", "updated_at")
