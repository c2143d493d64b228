"""Hash-chain arithmetic shared by the writer and the verifier, and the verifier itself.

Each event stores ``hash = SHA-256(prev_hash || RFC 8785 JSON of its body)`` and the previous
event's hash as ``prev_hash``; the chain head row holds the last ``(seq, hash)``. A chain whose
oldest events were purged by retention starts at its newest checkpoint instead of genesis.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import rfc8785
from django.db import connection, transaction

GENESIS_HASH = "0" * 64
SYSTEM_CHAIN = "system"
PURGED_ACTION = "audit.purged"


TENANT_CHAIN_PREFIX = "tenant:"  # a tenant's chain is this and its slug


def chain_for_tenant(tenant_slug: str | None) -> str:
    return f"{TENANT_CHAIN_PREFIX}{tenant_slug}" if tenant_slug else SYSTEM_CHAIN


def event_body(
    *,
    chain: str,
    seq: int,
    created_at: str,
    tenant_id: int | None,
    actor_kind: str,
    actor_id: str,
    actor_display: str,
    action: str,
    task_id: str,
    data: Any,
    request_id: str,
) -> dict[str, Any]:
    """The canonical content of an event, the exact input of its hash."""
    return {
        "chain": chain,
        "seq": seq,
        "created_at": created_at,
        "tenant_id": tenant_id,
        "actor_kind": actor_kind,
        "actor_id": actor_id,
        "actor_display": actor_display,
        "action": action,
        "task_id": task_id,
        "data": data,
        "request_id": request_id,
    }


def link_hash(prev_hash: str, body: dict[str, Any]) -> str:
    """SHA-256(previous hash || RFC 8785 canonical JSON of the event)."""
    return hashlib.sha256(prev_hash.encode() + rfc8785.dumps(body)).hexdigest()


# ---------------------------------------------------------------- verification
HASH_MISMATCH = "hash mismatch"
SEQ_GAP = "seq gap"
PREV_HASH_MISMATCH = "prev_hash mismatch"
HEAD_MISMATCH = "head mismatch"
CHECKPOINT_MISMATCH = "checkpoint mismatch"

# The columns that make up an event body, in event_body's keyword order, then the chain fields.
BODY_FIELDS = (
    "chain",
    "seq",
    "created_at",
    "tenant_id",
    "actor_kind",
    "actor_id",
    "actor_display",
    "action",
    "task_id",
    "data",
    "request_id",
)
ROW_FIELDS = (*BODY_FIELDS, "prev_hash", "hash")


@dataclass(frozen=True)
class Break:
    """The first broken link of a chain: where (``seq``), which kind, and the particulars."""

    chain: str
    seq: int
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.chain} seq {self.seq}: {self.kind} ({self.detail})"


@dataclass(frozen=True)
class ChainReport:
    """What verifying one chain found: ``broken`` is None when the chain is intact."""

    chain: str
    events: int
    start_seq: int  # the retention checkpoint's seq, 0 without one
    last_seq: int
    last_hash: str
    broken: Break | None
    # Events recorded but not yet sealed (audit/seal.py), after the sealed ones; not verified.
    unsealed: int = 0
    oldest_unsealed: datetime | None = None

    @property
    def ok(self) -> bool:
        """The sealed events are intact (an unsealed tail is not a break: see ``late``)."""
        return self.broken is None

    def late(self, bound_s: float, now: datetime | None = None) -> bool:
        """Whether the oldest unsealed event waited longer than ``bound_s`` seconds."""
        if self.oldest_unsealed is None:
            return False
        waited = (now or datetime.now(UTC)) - self.oldest_unsealed
        return waited.total_seconds() > bound_s


def body_of_row(row: Sequence[Any]) -> dict[str, Any]:
    """The hashed body of an event given as a row of :data:`ROW_FIELDS` (or BODY_FIELDS)."""
    values = dict(zip(BODY_FIELDS, row, strict=False))
    created_at = values["created_at"]
    if not isinstance(created_at, str):
        values["created_at"] = created_at.isoformat()
    return event_body(**values)


def body_of_event(event: Any) -> dict[str, Any]:
    """The hashed body of a stored :class:`~audit.models.AuditEvent` (what its ``hash`` covers
    after ``prev_hash``)."""
    return body_of_row([getattr(event, name) for name in BODY_FIELDS])


def latest_checkpoint(chain: str) -> tuple[int, str]:
    """``(seq, hash)`` a chain starts from: its newest retention checkpoint, or genesis."""
    from audit.models import RetentionCheckpoint

    checkpoint = (
        RetentionCheckpoint.objects.filter(chain=chain)
        .order_by("-seq")
        .values_list("seq", "hash")
        .first()
    )
    return checkpoint if checkpoint is not None else (0, GENESIS_HASH)


@contextmanager
def consistent_snapshot() -> Iterator[None]:
    """Read the head and the events of a chain as of one moment.

    PostgreSQL: a REPEATABLE READ, READ ONLY transaction (writers are not blocked). SQLite: a
    transaction, which there takes the write lock (writers wait; embedded chains are small).
    Inside an existing transaction it adds nothing: the caller chose the isolation.
    """
    if connection.in_atomic_block:
        yield
        return
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        yield


def verify_chain(chain: str, *, chunk_size: int = 2000) -> ChainReport:
    """Verify one chain as of one moment (:func:`consistent_snapshot`); see :func:`_verify`.
    The report also counts the chain's unsealed tail (events the sealer has not linked yet)."""
    from django.db.models import Count, Min

    from audit.models import AuditEvent

    with consistent_snapshot():
        report = _verify(chain, chunk_size=chunk_size)
        tail = AuditEvent.objects.filter(chain=chain, seq__isnull=True).aggregate(
            count=Count("id"), oldest=Min("created_at")
        )
    return replace(report, unsealed=tail["count"], oldest_unsealed=tail["oldest"])


def _verify(chain: str, *, chunk_size: int) -> ChainReport:
    """Walk one chain in sequence order from its checkpoint and check every link.

    Only sealed events are walked (an unsealed one has no place in the chain yet).
    Returns a :class:`ChainReport` naming the first broken event, if any: a missing or extra
    sequence number (``seq gap``), a ``prev_hash`` that is not the previous event's hash, a
    stored hash that is not the hash of the stored content, a chain head that does not match the
    last event, or a checkpoint not attested by an ``audit.purged`` event of the chain.
    """
    from audit.models import AuditEvent, ChainHead

    start_seq, start_hash = latest_checkpoint(chain)
    expected_seq, expected_prev = start_seq + 1, start_hash
    attested = start_seq == 0
    count = 0

    def report(broken: Break | None) -> ChainReport:
        return ChainReport(
            chain=chain,
            events=count,
            start_seq=start_seq,
            last_seq=expected_seq - 1,
            last_hash=expected_prev,
            broken=broken,
        )

    rows = (
        AuditEvent.objects.filter(chain=chain, seq__isnull=False)
        .order_by("seq")
        .values_list(*ROW_FIELDS)
        .iterator(chunk_size=chunk_size)
    )
    for row in rows:
        seq, prev_hash, stored_hash = row[1], row[-2], row[-1]
        if seq != expected_seq:
            where = (
                f"expected seq {expected_seq}, found {seq}"
                if seq > expected_seq
                else f"seq {seq} is at or before the chain start (checkpoint seq {start_seq})"
            )
            return report(Break(chain, min(seq, expected_seq), SEQ_GAP, where))
        if prev_hash != expected_prev:
            return report(
                Break(
                    chain,
                    seq,
                    PREV_HASH_MISMATCH,
                    f"prev_hash {prev_hash[:12]}… is not the hash of seq "
                    f"{seq - 1} ({expected_prev[:12]}…)",
                )
            )
        body = body_of_row(row)
        computed = link_hash(prev_hash, body)
        if computed != stored_hash:
            return report(
                Break(
                    chain,
                    seq,
                    HASH_MISMATCH,
                    f"stored {stored_hash[:12]}…, content hashes to {computed[:12]}…",
                )
            )
        if body["action"] == PURGED_ACTION and not attested:
            checkpoint = (body["data"] or {}).get("checkpoint") or {}
            if checkpoint.get("seq") == start_seq:
                if checkpoint.get("hash") != start_hash:
                    return report(
                        Break(
                            chain,
                            start_seq,
                            CHECKPOINT_MISMATCH,
                            f"checkpoint hash differs from the one audit.purged seq {seq} recorded",
                        )
                    )
                attested = True
        count += 1
        expected_seq, expected_prev = seq + 1, stored_hash
    if not attested:
        return report(
            Break(
                chain,
                start_seq,
                CHECKPOINT_MISMATCH,
                "no audit.purged event of the chain records this checkpoint",
            )
        )
    head = ChainHead.objects.filter(chain=chain).values_list("seq", "hash").first()
    last_seq = expected_seq - 1
    if head is None:
        if count:
            return report(Break(chain, last_seq, HEAD_MISMATCH, "the chain has no head row"))
    elif head[0] > last_seq:
        return report(
            Break(
                chain,
                last_seq + 1,
                SEQ_GAP,
                f"the chain head is at seq {head[0]} but events end at {last_seq}",
            )
        )
    elif head[0] < last_seq:
        return report(
            Break(
                chain,
                head[0] + 1,
                HEAD_MISMATCH,
                f"events continue past the chain head (seq {head[0]}) to {last_seq}",
            )
        )
    elif head[1] != expected_prev:
        return report(
            Break(
                chain, last_seq, HEAD_MISMATCH, "the chain head's hash is not the last event's hash"
            )
        )
    return report(None)


def known_chains() -> list[str]:
    """Every chain with a head, an event or a checkpoint, sorted."""
    from audit.models import AuditEvent, ChainHead, RetentionCheckpoint

    chains = set(ChainHead.objects.values_list("chain", flat=True))
    chains.update(AuditEvent.objects.values_list("chain", flat=True).distinct())
    chains.update(RetentionCheckpoint.objects.values_list("chain", flat=True).distinct())
    return sorted(chains)


def verify_chains(chains: Iterable[str] | None = None) -> Iterator[ChainReport]:
    """Verify the given chains (default: all known chains), one report each, in order."""
    for chain in known_chains() if chains is None else chains:
        yield verify_chain(chain)
