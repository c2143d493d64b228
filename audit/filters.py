"""Filters (django-filter) and cursor pagination of the audit events list (audit.api).

The FilterSet only narrows a queryset that access.py already scoped to what the caller may read.
"""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import Q, QuerySet

from audit.chain import chain_for_tenant
from audit.models import AuditEvent
from mcptasks.restkit.filters import UtcDateTimeFilter
from mcptasks.restkit.pagination import CursorPagination


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


class AuditEventPagination(CursorPagination):
    ordering = ("-id",)
