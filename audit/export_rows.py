"""What an export holds: the filters that select its events, the span of each chain it covers,
and how stored rows are encoded — JSON Lines, CSV (formula cells neutralised) and OCSF, with
the SQL that renders a row's timestamp as the chain hashed it. audit.export streams them;
audit.export_verify reads them back."""

from __future__ import annotations

import csv
import io
import json
import json.encoder
import re
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from django.db import NotSupportedError
from django.db.models import Func, Q, TextField
from django.utils import timezone

from audit import ocsf
from audit.chain import ROW_FIELDS

FORMATS = ("csv", "jsonl", "ocsf")  # ocsf: JSONL of OCSF events (audit/ocsf.py)
EXPORTED_ACTION = "audit.exported"
MANIFEST_VERSION = 1
CHUNK_ROWS = 2000


# ---------------------------------------------------------------- filters
@dataclass(frozen=True)
class ExportFilters:
    """Which events an export holds; empty fields do not filter.

    ``chain`` (``tenant:<slug>`` or ``system``), ``actor`` (user id or display name), ``action``,
    ``task_id``, and a time range ``since`` (inclusive) to ``until`` (exclusive).
    """

    chain: str = ""
    actor: str = ""
    action: str = ""
    task_id: str = ""
    since: datetime | None = None
    until: datetime | None = None

    def __post_init__(self) -> None:
        for moment in (self.since, self.until):
            if moment is not None and timezone.is_naive(moment):
                raise ValueError("export time filters must be timezone-aware")

    def as_dict(self) -> dict[str, Any]:
        values = asdict(self)
        for name in ("since", "until"):
            values[name] = values[name].isoformat() if values[name] else None
        return values

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ExportFilters:
        moments = {
            name: datetime.fromisoformat(values[name]) if values.get(name) else None
            for name in ("since", "until")
        }
        return cls(
            chain=values.get("chain") or "",
            actor=values.get("actor") or "",
            action=values.get("action") or "",
            task_id=values.get("task_id") or "",
            **moments,
        )

    def q(self) -> Q:
        """The filters other than the chain, as a query condition."""
        condition = Q()
        if self.actor:
            condition &= Q(actor_id=self.actor) | Q(actor_display=self.actor)
        if self.action:
            condition &= Q(action=self.action)
        if self.task_id:
            condition &= Q(task_id=self.task_id)
        if self.since is not None:
            condition &= Q(created_at__gte=self.since)
        if self.until is not None:
            condition &= Q(created_at__lt=self.until)
        return condition

    def matches(self, event: dict[str, Any]) -> bool:
        """Whether an exported event (a parsed row) satisfies the filters."""
        created_at = datetime.fromisoformat(event["created_at"])
        return (
            (not self.chain or event["chain"] == self.chain)
            and (not self.actor or self.actor in (event["actor_id"], event["actor_display"]))
            and (not self.action or event["action"] == self.action)
            and (not self.task_id or event["task_id"] == self.task_id)
            and (self.since is None or created_at >= self.since)
            and (self.until is None or created_at < self.until)
        )


@dataclass
class ChainSpan:
    first_seq: int
    last_seq: int
    count: int = 0


# ---------------------------------------------------------------- row encoding
class IsoTimestamp(Func):
    """A UTC timestamp as ``datetime.isoformat()`` writes it (the form the chain hashes),
    formatted by the database: parsing a datetime per row would cost more than the rest of the
    export. Microseconds appear only when not zero, as in Python."""

    output_field = TextField()

    def as_postgresql(
        self, compiler: Any, connection: Any, **extra: Any
    ) -> tuple[str, tuple[Any, ...]]:
        sql, params = compiler.compile(self.source_expressions[0])
        # One to_char (the costly part); ".000000" can only be the fraction, which Python omits.
        return (
            f"replace(to_char(({sql} AT TIME ZONE 'UTC'), "
            f"'YYYY-MM-DD\"T\"HH24:MI:SS.US'), '.000000', '') || '+00:00'",
            tuple(params),
        )

    def as_sqlite(
        self, compiler: Any, connection: Any, **extra: Any
    ) -> tuple[str, tuple[Any, ...]]:
        # Django stores SQLite datetimes as UTC text 'YYYY-MM-DD HH:MM:SS[.ffffff]'.
        sql, params = compiler.compile(self.source_expressions[0])
        return f"(replace({sql}, ' ', 'T') || '+00:00')", tuple(params)

    def as_sql(
        self,
        compiler: Any,
        connection: Any,
        function: str | None = None,
        template: str | None = None,
        arg_joiner: str | None = None,
        **extra_context: Any,
    ) -> tuple[str, tuple[Any, ...]]:
        raise NotSupportedError("audit exports support PostgreSQL and SQLite")


# What an export selects: the stored columns, with created_at and data as text.
EXPORT_COLUMNS = tuple(
    {"created_at": "created_at_text", "data": "data_text"}.get(name, name) for name in ROW_FIELDS
)
_DATA = ROW_FIELDS.index("data")
_q = json.encoder.encode_basestring  # type: ignore[attr-defined]  # the C string escaper
_JSONL_LINE = (
    '{{"chain":{},"seq":{},"created_at":{},"tenant_id":{},"actor_kind":{},'
    '"actor_id":{},"actor_display":{},"action":{},"task_id":{},"data":{},'
    '"request_id":{},"prev_hash":{},"hash":{}}}\n'
)


def _event_dict(row: tuple[Any, ...]) -> dict[str, Any]:
    """A stored event (a row of ROW_FIELDS from the ORM) as its export reads back."""
    event = dict(zip(ROW_FIELDS, row, strict=True))
    event["created_at"] = event["created_at"].isoformat()
    return event


def _jsonl_chunk(rows: list[tuple[Any, ...]]) -> bytes:
    return "".join(
        [
            _JSONL_LINE.format(
                _q(chain),
                int(seq),
                _q(created_at),
                "null" if tenant_id is None else int(tenant_id),
                _q(actor_kind),
                _q(actor_id),
                _q(actor_display),
                _q(action),
                _q(task_id),
                data,
                _q(request_id),
                _q(prev_hash),
                _q(digest),
            )
            for (
                chain,
                seq,
                created_at,
                tenant_id,
                actor_kind,
                actor_id,
                actor_display,
                action,
                task_id,
                data,
                request_id,
                prev_hash,
                digest,
            ) in rows
        ]
    ).encode("utf-8", "surrogatepass")


def _ocsf_chunk(rows: list[tuple[Any, ...]]) -> bytes:
    lines = []
    for row in rows:
        event = dict(zip(ROW_FIELDS, row, strict=True))
        event["data"] = json.loads(event["data"])
        lines.append(json.dumps(ocsf.to_ocsf(event), ensure_ascii=False) + "\n")
    return "".join(lines).encode("utf-8", "surrogatepass")


# OWASP's CSV-injection rule: a cell a spreadsheet would read as a formula (it starts with
# =, +, -, @, a tab or a carriage return) gets a leading apostrophe. A cell that already starts
# with apostrophes before such a character gets one more, so reading drops exactly one and the
# export stays a faithful (hash-checkable) copy of the stored events.
_FORMULA_CELL = re.compile(r"'*[=+\-@\t\r]")


def neutralise_cell(value: Any) -> Any:
    """A CSV cell as exported: formula prefixes neutralised (see :func:`restore_cell`)."""
    if isinstance(value, str) and _FORMULA_CELL.match(value):
        return "'" + value
    return value


def restore_cell(value: str) -> str:
    """A CSV cell as stored: the inverse of :func:`neutralise_cell`."""
    if value.startswith("'") and _FORMULA_CELL.match(value, 1):
        return value[1:]
    return value


def _csv_chunk(rows: list[tuple[Any, ...]]) -> bytes:
    buffer = io.StringIO()
    # None (a system event's tenant) is written as ""
    csv.writer(buffer).writerows([neutralise_cell(value) for value in row] for row in rows)
    return buffer.getvalue().encode("utf-8", "surrogatepass")


def _csv_header() -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer).writerow(ROW_FIELDS)
    return buffer.getvalue().encode()
