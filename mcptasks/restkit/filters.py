"""Filter fields every REST list shares (mcptasks.api.filters, audit.filters)."""

from __future__ import annotations

from datetime import UTC
from typing import Any

import django_filters
import django_filters.fields
from django.core.exceptions import ValidationError


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
