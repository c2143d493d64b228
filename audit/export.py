"""Audit exports: CSV or JSONL streamed with constant memory, and a signed manifest (DESIGN §7).

:class:`ExportStream` yields the bytes of an export chunk by chunk (for a file or a streaming
HTTP response) while it counts rows and hashes the bytes; :func:`finish_export` then records the
``audit.exported`` event and returns the signed manifest. :func:`export_to_file` does both for
``manage.py export_audit``. :func:`verify_export` checks a file against its manifest and the
chains (``manage.py verify_export``).

Rows are the stored events exactly (already redacted when recorded), ordered by chain and
sequence, with their ``prev_hash`` and ``hash`` so anyone can recompute each event's hash. The
chain heads are read *before* the rows and every chain is read up to its head, so the manifest's
heads and the exported rows describe the same moment although no transaction is held open.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import json.encoder
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

from django.db import NotSupportedError
from django.db.models import Func, Q, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from audit import ocsf, signing
from audit.chain import ROW_FIELDS, body_of_row, latest_checkpoint, link_hash
from audit.models import AuditEvent, ChainHead
from audit.record import Actor, record

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


# ---------------------------------------------------------------- streaming
@dataclass
class ChainSpan:
    first_seq: int
    last_seq: int
    count: int = 0


@dataclass
class ExportStream:
    """Iterate to get the export's bytes; afterwards ``count``, ``chains`` and ``sha256`` hold
    what was written. Holds one chunk of rows at a time.

    ``heads`` (chain → ``{"seq", "hash"}``) is read from the chain heads when not given; pass
    the heads of an earlier export to stream the same events again.
    """

    filters: ExportFilters
    format: str
    chunk_rows: int = CHUNK_ROWS
    count: int = 0
    chains: dict[str, ChainSpan] = field(default_factory=dict)
    heads: dict[str, dict[str, Any]] = field(default_factory=dict)
    _digest: Any = field(default_factory=hashlib.sha256)
    _done: bool = False

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}")
        if self.heads:
            return  # pinned by the caller (an export served again later)
        heads = ChainHead.objects.order_by("chain")
        if self.filters.chain:
            heads = heads.filter(chain=self.filters.chain)
        self.heads = {
            chain: {"seq": seq, "hash": digest}
            for chain, seq, digest in heads.values_list("chain", "seq", "hash")
        }

    @property
    def sha256(self) -> str:
        return str(self._digest.hexdigest())

    def __iter__(self) -> Iterator[bytes]:
        if self._done:
            raise RuntimeError("an ExportStream can be iterated once")
        encode = {"csv": _csv_chunk, "jsonl": _jsonl_chunk, "ocsf": _ocsf_chunk}[self.format]
        if self.format == "csv":
            yield self._account(_csv_header())
        for chain, head in self.heads.items():
            rows = (
                AuditEvent.objects.filter(self.filters.q(), chain=chain, seq__lte=head["seq"])
                .annotate(
                    created_at_text=IsoTimestamp("created_at"), data_text=Cast("data", TextField())
                )
                .order_by("seq")
                .values_list(*EXPORT_COLUMNS)
                .iterator(chunk_size=self.chunk_rows)
            )
            for batch in _batches(rows, self.chunk_rows):
                self._note(chain, batch)
                yield self._account(encode(batch))
        self._done = True

    def _account(self, chunk: bytes) -> bytes:
        self._digest.update(chunk)
        return chunk

    def _note(self, chain: str, batch: list[tuple[Any, ...]]) -> None:
        span = self.chains.setdefault(chain, ChainSpan(first_seq=batch[0][1], last_seq=0))
        span.last_seq = batch[-1][1]
        span.count += len(batch)
        self.count += len(batch)

    def manifest_body(self) -> dict[str, Any]:
        """The manifest's content, before the export event and the signature."""
        if not self._done:
            raise RuntimeError("the export has not been streamed to the end")
        checkpoints = {}
        for chain in self.heads:
            seq, digest = latest_checkpoint(chain)
            if seq:
                checkpoints[chain] = {"seq": seq, "hash": digest}
        return {
            "manifest_version": MANIFEST_VERSION,
            "format": self.format,
            "created_at": timezone.now().isoformat(),
            "filters": self.filters.as_dict(),
            "count": self.count,
            "content_sha256": self.sha256,
            "chains": {chain: asdict(span) for chain, span in self.chains.items()},
            "chain_heads": self.heads,
            "checkpoints": checkpoints,
        }


def _batches(rows: Iterable[tuple[Any, ...]], size: int) -> Iterator[list[tuple[Any, ...]]]:
    batch: list[tuple[Any, ...]] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def finish_export(stream: ExportStream, *, actor: Actor) -> dict[str, Any]:
    """Record the ``audit.exported`` event of a streamed export; return its signed manifest.

    The event goes to the exported tenant's chain, or to ``system`` for an export that is not
    limited to one tenant; it holds the filters, format, count, content digest and key id, and
    the manifest names it (``export_event``), so each attests the other.
    """
    body = stream.manifest_body()
    key = signing.current_key()
    tenant_id, tenant_slug = _tenant_of_chain(stream.filters.chain)
    event = record(
        action=EXPORTED_ACTION,
        actor=actor,
        tenant_id=tenant_id,
        tenant_slug=tenant_slug,
        data={
            "filters": body["filters"],
            "format": body["format"],
            "count": body["count"],
            "content_sha256": body["content_sha256"],
            "key_id": key.key_id,
        },
    )
    body["export_event"] = {"chain": event.chain, "seq": event.seq, "hash": event.hash}
    return signing.sign(body, key)


def _tenant_of_chain(chain: str) -> tuple[int | None, str | None]:
    if not chain.startswith("tenant:"):
        return None, None
    from mcptasks.models import Tenant

    slug = chain.removeprefix("tenant:")
    tenant_id = Tenant.objects.filter(slug=slug).values_list("pk", flat=True).first()
    return (tenant_id, slug) if tenant_id is not None else (None, None)


def manifest_path_for(path: Path) -> Path:
    return path.with_name(path.name + ".manifest.json")


def export_to_file(
    filters: ExportFilters, fmt: str, out: BinaryIO, *, actor: Actor
) -> dict[str, Any]:
    """Stream an export into ``out``; return the signed manifest (the caller stores it)."""
    stream = ExportStream(filters=filters, format=fmt)
    for chunk in stream:
        out.write(chunk)
    out.flush()
    return finish_export(stream, actor=actor)


def dump_manifest(manifest: dict[str, Any]) -> str:
    return json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"


# ---------------------------------------------------------------- verification
@dataclass
class ExportCheck:
    """What :func:`verify_export` found: ``problems`` is empty when the export verifies;
    ``notes`` are facts that are not failures (events purged by retention since the export)."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    count: int = 0
    key_id: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems


MAX_PROBLEMS = 20


def verify_export(
    export: BinaryIO,
    manifest: dict[str, Any],
    *,
    trusted_keys: dict[str, str] | None = None,
    anchors: dict[str, dict[int, Any]] | None = None,
) -> ExportCheck:
    """Check an export against its manifest and the stored chains.

    Checks, in order: the manifest's signature by a trusted key; the SHA-256 of the bytes; every
    row's hash recomputed from its content; links between consecutive rows; the order, filters,
    count and per-chain spans the manifest states; that each exported event is stored with the
    same hash (or was purged by retention since); that the manifest's chain heads and its
    ``audit.exported`` event are in the chains; with ``anchors`` (chain → seq →
    :class:`audit.digests.Anchor`, from the digest files), that every exported event a digest
    attests has the attested hash.
    """
    check = ExportCheck()
    try:
        check.key_id = signing.check_signature(
            manifest, trusted_keys if trusted_keys is not None else signing.trusted_public_keys()
        )
    except signing.SignatureError as exc:
        check.problems.append(f"signature: {exc}")
        return check
    fmt = manifest.get("format")
    if fmt not in FORMATS:
        check.problems.append(f"manifest: unknown format {fmt!r}")
        return check
    digest = hashlib.sha256()
    rows = _parse(_hashing(export, digest), fmt, check)
    _check_rows(rows, manifest, check, anchors or {})
    if digest.hexdigest() != manifest.get("content_sha256"):
        check.problems.insert(
            0,
            "content: the SHA-256 of the file is not the manifest's "
            "content_sha256 (the file was changed)",
        )
    _check_anchors(manifest, check)
    return check


def _hashing(export: BinaryIO, digest: Any) -> Iterator[bytes]:
    for line in export:
        digest.update(line)
        yield line


def _parse(lines: Iterator[bytes], fmt: str, check: ExportCheck) -> Iterator[dict[str, Any]]:
    text = (line.decode("utf-8", "surrogatepass") for line in lines)
    if fmt == "ocsf":
        for number, line in enumerate(text, start=1):
            try:
                rendered = json.loads(line)
                stored = rendered["unmapped"]["mcptasks_audit"]
                if rendered != json.loads(json.dumps(ocsf.to_ocsf(stored))):
                    _problem(check, f"row {number}: the OCSF fields do not render its event")
            except (ValueError, KeyError, TypeError):
                _problem(check, f"row {number}: not an OCSF event of this export")
                continue
            yield stored
        return
    if fmt == "jsonl":
        for number, line in enumerate(text, start=1):
            try:
                yield json.loads(line)
            except ValueError:
                check.problems.append(f"row {number}: not valid JSON")
        return
    reader = csv.reader(text)
    if next(reader, None) != list(ROW_FIELDS):
        check.problems.append("csv: the header row is not the export's columns")
    for number, values in enumerate(reader, start=1):
        try:
            cells = [restore_cell(value) for value in values]
            event: dict[str, Any] = dict(zip(ROW_FIELDS, cells, strict=True))
            event["seq"] = int(event["seq"])
            event["tenant_id"] = int(event["tenant_id"]) if event["tenant_id"] else None
            event["data"] = json.loads(event["data"])
        except ValueError:
            check.problems.append(f"row {number}: malformed CSV row")
            continue
        yield event


def _problem(check: ExportCheck, message: str) -> None:
    if len(check.problems) < MAX_PROBLEMS:
        check.problems.append(message)


def _check_rows(
    rows: Iterator[dict[str, Any]],
    manifest: dict[str, Any],
    check: ExportCheck,
    anchors: dict[str, dict[int, Any]],
) -> None:
    filters = ExportFilters.from_dict(manifest.get("filters") or {})
    spans: dict[str, ChainSpan] = {}
    previous: dict[str, Any] | None = None
    pending: list[dict[str, Any]] = []
    for event in rows:
        check.count += 1
        where = f"{event.get('chain')} seq {event.get('seq')}"
        try:
            computed = link_hash(
                event["prev_hash"], body_of_row([event[name] for name in ROW_FIELDS])
            )
        except (KeyError, TypeError, ValueError) as exc:
            _problem(check, f"{where}: unreadable event ({exc})")
            continue
        if computed != event["hash"]:
            _problem(check, f"{where}: content does not match its hash")
        anchor = anchors.get(event["chain"], {}).get(event["seq"])
        if anchor is not None and anchor.hash != event["hash"]:
            _problem(
                check,
                f"{where}: the digest of {anchor.hour} ({anchor.name}) attests another hash: "
                f"events after seq {anchor.previous_seq} were rewritten after {anchor.hour}",
            )
        if previous is not None:
            if (previous["chain"], previous["seq"]) >= (event["chain"], event["seq"]):
                _problem(check, f"{where}: rows are not in chain and sequence order")
            elif (
                previous["chain"] == event["chain"]
                and previous["seq"] + 1 == event["seq"]
                and previous["hash"] != event["prev_hash"]
            ):
                _problem(check, f"{where}: prev_hash is not the hash of the row before")
        if not filters.matches(event):
            _problem(check, f"{where}: outside the manifest's filters")
        span = spans.setdefault(event["chain"], ChainSpan(first_seq=event["seq"], last_seq=0))
        span.last_seq, span.count = event["seq"], span.count + 1
        previous = event
        pending.append(event)
        if len(pending) >= CHUNK_ROWS:
            _check_stored(pending, check)
            pending = []
    _check_stored(pending, check)
    if check.count != manifest.get("count"):
        _problem(
            check,
            f"count: the file holds {check.count} events, the manifest says "
            f"{manifest.get('count')}",
        )
    if {chain: asdict(span) for chain, span in spans.items()} != manifest.get("chains"):
        _problem(check, "chains: the first/last sequences in the file are not the manifest's")


def _check_stored(events: list[dict[str, Any]], check: ExportCheck) -> None:
    """Compare a batch of exported events with the stored ones, every column (one query per
    chain): the table must still hold exactly what was exported."""
    by_chain: dict[str, dict[int, dict[str, Any]]] = {}
    for event in events:
        by_chain.setdefault(event["chain"], {})[event["seq"]] = event
    for chain, exported in by_chain.items():
        stored = {
            row[1]: _event_dict(row)
            for row in AuditEvent.objects.filter(chain=chain, seq__in=list(exported)).values_list(
                *ROW_FIELDS
            )
        }
        checkpoint_seq = latest_checkpoint(chain)[0]
        purged = 0
        for seq, event in exported.items():
            if seq not in stored:
                if seq <= checkpoint_seq:
                    purged += 1
                else:
                    _problem(check, f"{chain} seq {seq}: not in the audit table")
                continue
            differing = [name for name in ROW_FIELDS if stored[seq][name] != event.get(name)]
            if differing:
                _problem(
                    check, f"{chain} seq {seq}: the stored event differs ({', '.join(differing)})"
                )
        if purged:
            check.notes.append(
                f"{chain}: {purged} exported events were purged by retention since; not compared"
            )


def _stored_hash(chain: str, seq: int) -> str | None:
    return AuditEvent.objects.filter(chain=chain, seq=seq).values_list("hash", flat=True).first()


def _check_anchors(manifest: dict[str, Any], check: ExportCheck) -> None:
    """The chain heads and the export event named by the manifest must be in the chains."""
    for chain, head in (manifest.get("chain_heads") or {}).items():
        if not head.get("seq"):
            continue
        stored = _stored_hash(chain, head["seq"])
        if stored is None and head["seq"] <= latest_checkpoint(chain)[0]:
            check.notes.append(f"{chain}: the head at export time was purged by retention since")
        elif stored != head.get("hash"):
            _problem(
                check,
                f"{chain} seq {head['seq']}: the chain head at export time is not the stored event",
            )
    event = manifest.get("export_event") or {}
    stored_event = (
        AuditEvent.objects.filter(chain=event.get("chain", ""), seq=event.get("seq", 0))
        .values("action", "hash", "data")
        .first()
    )
    if stored_event is None:
        if event.get("seq", 0) <= latest_checkpoint(event.get("chain", ""))[0]:
            check.notes.append("the audit.exported event was purged by retention since")
        else:
            _problem(check, "export_event: the audit.exported event is not in the chain")
    elif (
        stored_event["action"] != EXPORTED_ACTION
        or stored_event["hash"] != event.get("hash")
        or (stored_event["data"] or {}).get("content_sha256") != manifest["content_sha256"]
    ):
        _problem(
            check, "export_event: the chain's audit.exported event does not record this export"
        )
