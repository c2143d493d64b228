"""Cursor pagination of every REST list (mcptasks.api.filters, audit.filters): keyset pages on
the list's ordering, with the cursors of mcptasks.pagination (the dashboard's too)."""

from __future__ import annotations

from typing import Any

from django.db import models
from rest_framework import exceptions, pagination
from rest_framework.utils.urls import replace_query_param

from mcptasks import inputs
from mcptasks.pagination import beyond, decode_cursor, encode_cursor

NEXT, PREVIOUS = "n", "p"


class CursorPagination(pagination.CursorPagination):
    """Stable keyset pages in ``ordering`` (its last field unique, so no row is lost or seen
    twice). A cursor is the client's to echo, not to write: one that does not decode, or whose
    position is not a value of the ordering's fields (a date-time, an id) or not storable text,
    is invalid input (422 naming the cursor), never a query the database refuses.

    (DRF's CursorPagination is the base for its OpenAPI description — the ``cursor`` and
    ``page_size`` parameters, the ``next``/``previous``/``results`` page — not its paging.)"""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200
    ordering: tuple[str, ...] = ("-id",)
    later_position: tuple[Any, ...] | None = None
    earlier_position: tuple[Any, ...] | None = None

    def paginate_queryset(self, queryset: Any, request: Any, view: Any = None) -> Any:
        self.request = request
        self.base_url = request.build_absolute_uri()
        self.page_size = self.get_page_size(request) or self.page_size
        direction, position = self.decode_position(request, queryset.model)
        backwards = direction == PREVIOUS
        order = tuple(_flipped(name) for name in self.ordering) if backwards else self.ordering
        rows = queryset.order_by(*order)
        if position is not None:
            rows = rows.filter(beyond(order, position))
        found = list(rows[: self.page_size + 1])
        more = len(found) > self.page_size
        page = found[: self.page_size]
        if backwards:
            page.reverse()
        later, earlier = (True, more) if backwards else (more, position is not None)
        self.later_position = self.position_of(page[-1]) if page and later else None
        self.earlier_position = self.position_of(page[0]) if page and earlier else None
        return page

    def position_of(self, row: Any) -> tuple[Any, ...]:
        return tuple(getattr(row, name.lstrip("-")) for name in self.ordering)

    def get_next_link(self) -> str | None:
        return self._link(NEXT, self.later_position)

    def get_previous_link(self) -> str | None:
        return self._link(PREVIOUS, self.earlier_position)

    def _link(self, direction: str, position: tuple[Any, ...] | None) -> str | None:
        if position is None:
            return None
        cursor = encode_cursor(direction, *position)
        return replace_query_param(str(self.base_url), self.cursor_query_param, cursor)

    def decode_position(self, request: Any, model: Any) -> tuple[str, tuple[Any, ...] | None]:
        """(the direction, the position) a request's cursor names; (NEXT, None) without one."""
        raw = request.query_params.get(self.cursor_query_param)
        if raw is None:
            return NEXT, None
        parts = decode_cursor(raw)
        if not parts or parts[0] not in (NEXT, PREVIOUS) or len(parts) != len(self.ordering) + 1:
            raise invalid_cursor("it does not decode")
        position = []
        for name, raw_value in zip(self.ordering, parts[1:], strict=True):
            field = model._meta.get_field(name.lstrip("-"))
            value = _field_value(field, raw_value)
            if value is None:
                raise invalid_cursor(f"its position is not a {field.name}")
            position.append(value)
        return parts[0], tuple(position)


def _flipped(name: str) -> str:
    return name[1:] if name.startswith("-") else f"-{name}"


def _field_value(field: Any, raw: Any) -> Any:
    """``raw`` as a value of ``field`` (a date-time in UTC, an id), else None."""
    if isinstance(field, models.DateTimeField):
        return inputs.utc_datetime(raw) if isinstance(raw, str) else None
    if isinstance(field, models.IntegerField):
        is_id = isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw < 2**63
        return raw if is_id else None
    return raw if isinstance(raw, str) and inputs.storable(raw) else None


def invalid_cursor(why: str) -> exceptions.ValidationError:
    return exceptions.ValidationError(
        {"cursor": [f"Invalid cursor: {why}; follow the next and previous links this API gives."]}
    )
