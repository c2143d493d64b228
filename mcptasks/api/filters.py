"""Filters (django-filter) and cursor pagination of the REST API's task and token lists (the
audit list's are audit.filters').

The FilterSets only narrow a queryset that access.py already scoped to what the caller may see.
"""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import Q, QuerySet
from django.utils import timezone

from mcptasks.models import ApiToken, Task, TaskState
from mcptasks.restkit.filters import UtcDateTimeFilter
from mcptasks.restkit.pagination import CursorPagination
from mcptasks.wire import WIRE_STATUS

STATES_BY_STATUS: dict[str, list[str]] = {}
for _state, _status in WIRE_STATUS.items():
    STATES_BY_STATUS.setdefault(_status, []).append(str(_state))


class TaskFilter(django_filters.FilterSet):
    state = django_filters.MultipleChoiceFilter(
        choices=TaskState.choices, help_text="Internal state; repeat for several."
    )
    status = django_filters.MultipleChoiceFilter(
        choices=[(status, status) for status in STATES_BY_STATUS],
        method="filter_status",
        help_text="MCP wire status; repeat for several.",
    )
    tool = django_filters.CharFilter(field_name="tool_name", help_text="Tool name.")
    principal = django_filters.CharFilter(
        field_name="principal__username", help_text="Username of the principal."
    )
    tenant = django_filters.CharFilter(field_name="tenant__slug", help_text="Tenant slug.")
    backend_job_id = django_filters.CharFilter(help_text="The external job id.")
    created_after = UtcDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = UtcDateTimeFilter(field_name="created_at", lookup_expr="lt")
    updated_after = UtcDateTimeFilter(field_name="updated_at", lookup_expr="gte")
    updated_before = UtcDateTimeFilter(field_name="updated_at", lookup_expr="lt")

    class Meta:
        model = Task
        fields: list[str] = []

    def filter_status(self, queryset: QuerySet[Task], name: str, value: list[str]) -> Any:
        if not value:
            return queryset
        states = [state for status in value for state in STATES_BY_STATUS[status]]
        return queryset.filter(state__in=states)


class TokenFilter(django_filters.FilterSet):
    tenant = django_filters.CharFilter(field_name="tenant__slug", help_text="Tenant slug.")
    user = django_filters.CharFilter(field_name="user__username", help_text="Owner's username.")
    active = django_filters.BooleanFilter(
        method="filter_active", help_text="Only tokens that are (not) usable now."
    )

    class Meta:
        model = ApiToken
        fields: list[str] = []

    def filter_active(self, queryset: QuerySet[ApiToken], name: str, value: bool | None) -> Any:
        if value is None:
            return queryset
        usable = Q(revoked_at__isnull=True) & (
            Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
        )
        return queryset.filter(usable) if value else queryset.exclude(usable)


class TaskPagination(CursorPagination):
    ordering = ("-created_at", "id")


class TokenPagination(CursorPagination):
    ordering = ("-created_at", "id")
