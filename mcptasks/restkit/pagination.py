"""Cursor pagination of every REST list (mcptasks.api.filters, audit.filters)."""

from __future__ import annotations

from typing import Any

from django.db import models
from rest_framework import exceptions, pagination
from rest_framework.exceptions import NotFound

from mcptasks import inputs


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
