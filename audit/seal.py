"""The sealer: links unsealed audit events into their chains after commit (issue 23).

With ``MCPTASKS_AUDIT_SEAL_DELAY_MS`` > 0, :func:`audit.record.record` inserts an event with
``seq``, ``prev_hash`` and ``hash`` null — one INSERT, no chain head, no lock — so a tenant's
writing transactions no longer wait on one another. :func:`seal_chain` then, in one short
transaction, locks the chain head (``FOR UPDATE SKIP LOCKED``: a chain another sealer holds is
skipped, never forked), reads the chain's committed unsealed events in id order, gives each the
next ``seq``, the previous hash and its own hash (:func:`audit.chain.link_hash` of
:func:`audit.chain.body_of_row`, the arithmetic :func:`audit.chain.verify_chain` repeats) and
writes them with one statement (on PostgreSQL the ``SECURITY DEFINER`` function
``audit_seal_events`` of migration 0007, the only UPDATE the append-only trigger lets through),
then moves the head. Certificate Transparency logs bound their merge delay the same way.

Who seals, within the delay: a lazy daemon thread per process, woken after each commit that
wrote unsealed events (:func:`wake_after_commit`); it waits out the delay so that wake-ups
coalesce, then seals the chains it was told about. The periodic sweep (:mod:`mcptasks.sweeps`)
runs :func:`seal_pending` as the backstop, so an event whose process died between its commit
and its seal is sealed by the next sweep: nothing is lost. ``verify_audit`` reports a chain's
unsealed tail, a problem only when its oldest event is older than :func:`seal_bound_s`.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from django.conf import settings
from django.db import connection, transaction
from django.dispatch import Signal
from django.utils import timezone

from audit.chain import BODY_FIELDS, body_of_row, link_hash
from audit.models import AuditEvent, ChainHead

log = logging.getLogger(__name__)

BATCH = 1000  # events sealed per transaction
# Sent after the commit of a seal: ``chain``, ``tenant_id`` (None on the system chain) and
# ``last_seq``. The outbox's audit streams listen (mcptasks/outbox/writer.py).
sealed = Signal()

# The body columns of an unsealed event: every one but ``chain`` and ``seq``, in order.
_UNSEALED_BODY = BODY_FIELDS[2:]


def seal_chain(chain: str, *, limit: int = BATCH) -> int | None:
    """Seal up to ``limit`` committed unsealed events of ``chain``, oldest id first, in one
    transaction; how many, or None when another sealer holds the chain's head."""
    with transaction.atomic():
        head = _lock_head(chain)
        if head is None:
            return None
        rows = list(
            AuditEvent.objects.filter(chain=chain, seq__isnull=True)
            .order_by("id")
            .values_list("id", *_UNSEALED_BODY)[:limit]
        )
        if not rows:
            return 0
        seq, prev_hash = head.seq, head.hash
        ids, seqs, prev_hashes, hashes = [], [], [], []
        for row in rows:
            seq += 1
            digest = link_hash(prev_hash, body_of_row((chain, seq, *row[1:])))
            ids.append(row[0])
            seqs.append(seq)
            prev_hashes.append(prev_hash)
            hashes.append(digest)
            prev_hash = digest
        written = _write_seals(ids, seqs, prev_hashes, hashes)
        if written != len(ids):  # cannot happen under the head's lock: undo rather than fork
            raise RuntimeError(f"{chain}: sealed {written} of {len(ids)} events")
        ChainHead.objects.filter(chain=chain).update(
            seq=seq, hash=prev_hash, updated_at=timezone.now()
        )
        tenant_id = rows[0][2]
        transaction.on_commit(  # robust: a stream that cannot be woken now waits for the sweep
            lambda: sealed.send(sender=AuditEvent, chain=chain, tenant_id=tenant_id, last_seq=seq),
            robust=True,
        )
    return len(ids)


def seal_chains(chains: list[str]) -> tuple[int, list[str]]:
    """Seal every committed unsealed event of ``chains``; (how many, the chains skipped
    because another sealer held them)."""
    total, skipped = 0, []
    for chain in chains:
        while True:
            done = seal_chain(chain)
            if done is None:
                skipped.append(chain)
                break
            total += done
            if done < BATCH:
                break
    return total, skipped


def pending_chains() -> list[str]:
    """The chains with unsealed events, sorted."""
    return sorted(
        AuditEvent.objects.filter(seq__isnull=True)
        .order_by()
        .values_list("chain", flat=True)
        .distinct()
    )


def seal_pending() -> int:
    """Seal every chain's committed unsealed events (the sweep's backstop); how many."""
    return seal_chains(pending_chains())[0]


def seal_bound_s() -> float:
    """How old an unsealed event may get before ``verify_audit`` calls its chain late: the
    delay, plus a sweep interval (the backstop when no sealer thread ran), plus a grace of
    :data:`GRACE_S` for a loaded server."""
    return (
        settings.MCPTASKS_AUDIT_SEAL_DELAY_MS / 1000 + settings.MCPTASKS_SWEEP_INTERVAL_S + GRACE_S
    )


GRACE_S = 30.0


def _lock_head(chain: str) -> ChainHead | None:
    """The chain's head row, locked until commit (created by its first seal); None if another
    transaction holds it."""
    heads = ChainHead.objects.select_for_update(skip_locked=True).filter(chain=chain)
    head = heads.first()
    if head is None:
        ChainHead.objects.get_or_create(chain=chain)  # a concurrent first event may win
        head = heads.first()
    return head


def _write_seals(ids: list[int], seqs: list[int], prev_hashes: list[str], hashes: list[str]) -> int:
    """Set the chain columns of the unsealed events ``ids``; how many rows were sealed."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT audit_seal_events(%s::bigint[], %s::bigint[], %s::varchar[], "
                "%s::varchar[])",
                [ids, seqs, prev_hashes, hashes],
            )
            return int(cursor.fetchone()[0])
        table = connection.ops.quote_name(AuditEvent._meta.db_table)
        cursor.executemany(
            f"UPDATE {table} SET seq = %s, prev_hash = %s, hash = %s "  # noqa: S608 - model table
            "WHERE id = %s AND seq IS NULL",
            list(zip(seqs, prev_hashes, hashes, ids, strict=True)),
        )
        return int(cursor.rowcount)


# ---------------------------------------------------------------- the per-process sealer
class _Sealer:
    """A daemon thread that seals the chains it is told about, at most the delay later."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._chains: set[str] = set()
        self._thread: threading.Thread | None = None

    def wake(self, chain: str) -> None:
        with self._cond:
            self._chains.add(chain)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="mcptasks-audit-sealer", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._chains:
                    self._cond.wait()
            # Wake-ups arriving during the delay join this round: one seal per chain.
            time.sleep(settings.MCPTASKS_AUDIT_SEAL_DELAY_MS / 1000)
            with self._cond:
                chains, self._chains = sorted(self._chains), set()
            self._seal(chains)

    def _seal(self, chains: list[str]) -> None:
        try:
            _, skipped = seal_chains(chains)
        except Exception:
            log.exception("audit sealer: sealing %s failed; the sweep will seal them", chains)
            skipped = []
        finally:
            connection.close()  # this thread's connection: never left open between rounds
        if skipped:  # another sealer held them: it may have missed events committed since
            with self._cond:
                self._chains.update(skipped)


_sealer = _Sealer()
if hasattr(os, "register_at_fork"):  # a forked worker starts its own thread, with a fresh lock
    os.register_at_fork(after_in_child=_sealer._reset)


def wake_after_commit(chain: str) -> None:
    """After the current transaction commits, have this process's sealer seal ``chain``
    within the delay (nothing if it rolls back: there is nothing to seal). Robust: a sealer
    that cannot be woken (no thread to be had) is logged, never the committed caller's error —
    the sweep seals the event then."""
    transaction.on_commit(lambda: _sealer.wake(chain), robust=True)
