"""Checking an export against its signed manifest (``manage.py verify_export``): the file's
digest and rows, the chain links inside it, and the anchors still stored."""

from __future__ import annotations

import csv
import hashlib
import json
import json.encoder
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, BinaryIO

from audit import ocsf, signing
from audit.chain import ROW_FIELDS, body_of_row, latest_checkpoint, link_hash
from audit.export_rows import (
    CHUNK_ROWS,
    EXPORTED_ACTION,
    FORMATS,
    ChainSpan,
    ExportFilters,
    _event_dict,
    restore_cell,
)
from audit.models import AuditEvent


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
