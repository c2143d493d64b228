"""What every channel (MCP, REST, dashboard) checks of client input before it reaches a query.

Plain Python, no Django: ids in paths, text the database must store, and how deep a decoded
JSON value nests. Each check answers a value (or None), never raises, so each channel turns a
refusal into its own error (a JSON-RPC code, an HTTP problem, a 404 page).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

# A numeric id as clients write it: ASCII digits only (``str.isdigit`` also accepts "²" and
# "５", which ``int`` then refuses or reads as 5), and within a bigint.
_NUMERIC_ID = re.compile(r"[0-9]{1,18}")

# Deeper than any body of the REST API needs, shallow enough for every recursive reader after
# the parser (serializers, JSON Schema validation, redaction, the database's JSON functions).
MAX_JSON_DEPTH = 64


def numeric_id(value: Any) -> int | None:
    """The integer an id path segment or parameter names, or None if it is not one."""
    if not isinstance(value, str) or not _NUMERIC_ID.fullmatch(value):
        return None
    return int(value)


def utc_datetime(value: Any) -> datetime | None:
    """An ISO 8601 date-time with an offset, in UTC; None for anything else — including offsets
    and dates no database takes (PostgreSQL stops at ±15:59; a date at the calendar's edge may
    not convert to UTC)."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        parsed = datetime.fromisoformat(value)
        return parsed.astimezone(UTC) if parsed.tzinfo is not None else None
    except (ValueError, OverflowError):
        return None


def unstorable_text(value: Any, path: str = "") -> str | None:
    """Where ``value`` holds text no database stores — a NUL character, or a lone surrogate
    (what a JSON escape such as ``"\\udaf1"`` decodes to) — as a dotted path ("" for the value
    itself) fit to quote in an error message (see :func:`printable`); None if nowhere. Walks
    keys and values without recursion, so any depth is safe."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if not storable(item):
                return printable(where)
        elif isinstance(item, dict):
            for key, child in reversed(list(item.items())):
                inner = f"{where}.{key}" if where else str(key)
                stack.append((child, inner))
                stack.append((key, inner))
        elif isinstance(item, list | tuple):
            for index in range(len(item) - 1, -1, -1):
                stack.append((item[index], f"{where}.{index}" if where else str(index)))
    return None


def storable(text: str) -> bool:
    """Whether the database stores ``text`` as it is (no NUL, valid Unicode)."""
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def printable(text: str) -> str:
    """``text`` with what no response may carry escaped: a NUL as ``\\x00``, a lone surrogate
    as ``\\udaf1`` (it cannot be encoded as UTF-8)."""
    if storable(text):
        return text
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


def nesting_exceeds(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether arrays and objects in ``value`` nest more than ``limit`` levels deep."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


def secret_fields(params: dict[str, Any]) -> frozenset[str]:
    """Fields an elicitation request's schema marks as sensitive (``x-sensitive`` or password
    format): redacted in its audited answer and wherever the answer is shown."""
    properties = (params.get("requestedSchema") or {}).get("properties") or {}
    return frozenset(
        name
        for name, schema in properties.items()
        if isinstance(schema, dict)
        and (schema.get("x-sensitive") or schema.get("format") == "password")
    )
