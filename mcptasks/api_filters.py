"""Filters (django-filter) and cursor pagination of the REST API's lists.

The FilterSets only narrow a queryset that access.py already scoped to what the caller may see.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

import django_filters
import django_filters.fields
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q, QuerySet
from django.utils import timezone
from rest_framework import exceptions, pagination
from rest_framework.exceptions import NotFound

from audit.chain import chain_for_tenant
from audit.models import AuditEvent
from mcptasks import inputs
from mcptasks.models import ApiToken, Task, TaskState
from mcptasks.wire import WIRE_STATUS


class UtcIsoDateTimeField(django_filters.fields.IsoDateTimeField):
    """An ISO 8601 date-time, in UTC. Python accepts offsets up to ±23:59, PostgreSQL only up to
    ±15:59 (it would fail the query), and a date at the edge of the calendar may not convert:
    both are invalid input, not server errors."""

    def to_python(self, value: Any) -> Any:
        parsed = super().to_python(value)
        if parsed is None or parsed.tzinfo is None:
            return parsed
        try:
            return parsed.astimezone(UTC)
        except OverflowError:
            raise ValidationError(self.error_messages["invalid"], code="invalid") from None


class UtcDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcIsoDateTimeField


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


class AuditEventFilter(django_filters.FilterSet):
    chain = django_filters.CharFilter(help_text='"tenant:<slug>" or "system".')
    tenant = django_filters.CharFilter(method="filter_tenant", help_text="Tenant slug.")
    actor = django_filters.CharFilter(method="filter_actor", help_text="A user id or display name.")
    actor_kind = django_filters.CharFilter(help_text="principal, user, operator or system.")
    action = django_filters.CharFilter(help_text="e.g. task.created.")
    task = django_filters.CharFilter(field_name="task_id", help_text="Task id.")
    since = UtcDateTimeFilter(field_name="created_at", lookup_expr="gte", help_text="Inclusive.")
    until = UtcDateTimeFilter(field_name="created_at", lookup_expr="lt", help_text="Exclusive.")

    class Meta:
        model = AuditEvent
        fields: list[str] = []

    def filter_tenant(self, queryset: QuerySet[AuditEvent], name: str, value: str) -> Any:
        return queryset.filter(chain=chain_for_tenant(value))

    def filter_actor(self, queryset: QuerySet[AuditEvent], name: str, value: str) -> Any:
        return queryset.filter(Q(actor_id=value) | Q(actor_display=value))


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


class CursorPagination(pagination.CursorPagination):
    """Stable cursor pages. A cursor is the client's to echo, not to write: one that does not
    decode, or whose position is not a value of the ordering field (a date-time, an id) or not
    storable text, is invalid input (422 naming the cursor), never a query the database
    refuses."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200
    model: Any = None

    def paginate_queryset(self, queryset: Any, request: Any, view: Any = None) -> Any:
        self.model = queryset.model
        return super().paginate_queryset(queryset, request, view)

    def decode_cursor(self, request: Any) -> Any:
        try:
            cursor = super().decode_cursor(request)
        except NotFound:
            raise invalid_cursor("it does not decode") from None
        if cursor is None or cursor.position is None:
            return cursor
        position = self.position_value(cursor.position)
        if position is None:
            raise invalid_cursor(f"its position is not a {self.ordering[0].lstrip('-')}")
        # (DRF's stubs say int; the position is the ordering field's value as text.)
        return pagination.Cursor(
            offset=cursor.offset,
            reverse=cursor.reverse,
            position=position,  # type: ignore[arg-type]
        )

    def position_value(self, raw: Any) -> str | None:
        """The position as the ordering field's value (a date-time in UTC), else None."""
        if not isinstance(raw, str) or not inputs.storable(raw):
            return None
        field = self.model._meta.get_field(self.ordering[0].lstrip("-"))
        if isinstance(field, models.DateTimeField):
            moment = inputs.utc_datetime(raw)
            return None if moment is None else str(moment)
        if isinstance(field, models.IntegerField):
            number = inputs.numeric_id(raw)
            return None if number is None else str(number)
        return raw


def invalid_cursor(why: str) -> exceptions.ValidationError:
    return exceptions.ValidationError(
        {"cursor": [f"Invalid cursor: {why}; follow the next and previous links this API gives."]}
    )


class TaskPagination(CursorPagination):
    ordering = ("-created_at", "id")


class AuditEventPagination(CursorPagination):
    ordering = ("-id",)


class TokenPagination(CursorPagination):
    ordering = ("-created_at", "id")
