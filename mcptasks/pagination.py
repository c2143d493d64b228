"""Keyset pagination, the one way every list pages: the dashboard's selectors
(mcptasks.queries) and the REST lists (mcptasks.restkit.pagination). A cursor is the position
of a row in the list's ordering, as :func:`encode_cursor` writes it; :func:`decode_cursor`
gives its parts back, or None for anything this server did not write; :func:`beyond` is the
filter of the rows after a position.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Any

from django.db.models import Q

from mcptasks import inputs


def encode_cursor(*parts: Any) -> str:
    """An opaque cursor naming a position (date-times as ISO 8601): URL-safe base64 of JSON."""
    raw = json.dumps([p.isoformat() if isinstance(p, datetime) else p for p in parts])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> list[Any] | None:
    """The parts of a cursor, or None when it is missing or not one of ours."""
    if not cursor or len(cursor) > 400:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        parts = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(parts, list) or inputs.unstorable_text(parts) is not None:
        return None  # a NUL or a lone surrogate is not a position any query may compare with
    return parts


def beyond(ordering: tuple[str, ...], position: tuple[Any, ...]) -> Q:
    """The rows after ``position`` (a value per field) in ``ordering`` (field names, ``-`` for
    descending), ties broken by the later fields: (a > x) or (a = x and b > y) …"""
    after = Q()
    equal = Q()
    for index, (name, value) in enumerate(zip(ordering, position, strict=True)):
        field = name.lstrip("-")
        step = Q(**{f"{field}__{'lt' if name.startswith('-') else 'gt'}": value})
        after = step if index == 0 else after | (equal & step)
        equal &= Q(**{field: value})
    return after
