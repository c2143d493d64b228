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
An export holds sealed events only: one recorded but not yet sealed (audit/seal.py, at most the
seal delay old) has no place in its chain yet and is in the next export. The export's own
``audit.exported`` event is sealed as it is recorded, so the manifest can name it.

The filters and row encodings live in audit.export_rows, verification in audit.export_verify;
every caller imports their public names from here.
"""

from __future__ import annotations

import hashlib
import json
import json.encoder
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from django.db.models import TextField
from django.db.models.functions import Cast
from django.utils import timezone

from audit import signing
from audit.chain import latest_checkpoint
from audit.export_rows import (
    CHUNK_ROWS,
    EXPORT_COLUMNS,
    EXPORTED_ACTION,
    FORMATS,
    MANIFEST_VERSION,
    ChainSpan,
    ExportFilters,
    IsoTimestamp,
    _csv_chunk,
    _csv_header,
    _jsonl_chunk,
    _ocsf_chunk,
    neutralise_cell,
    restore_cell,
)
from audit.export_verify import MAX_PROBLEMS, ExportCheck, verify_export
from audit.models import AuditEvent, ChainHead
from audit.record import Actor, record

__all__ = [
    "CHUNK_ROWS",
    "EXPORTED_ACTION",
    "FORMATS",
    "MANIFEST_VERSION",
    "MAX_PROBLEMS",
    "ChainSpan",
    "ExportCheck",
    "ExportFilters",
    "ExportStream",
    "dump_manifest",
    "export_to_file",
    "finish_export",
    "manifest_path_for",
    "neutralise_cell",
    "restore_cell",
    "verify_export",
]


# ---------------------------------------------------------------- streaming
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
        inline=True,
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
