"""The one writer of audit events (DESIGN §7)."""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Field
from django.utils import timezone

from audit import seal
from audit.chain import chain_for_tenant, event_body, link_hash
from audit.models import AuditEvent, ChainHead
from audit.redact import redact

# The id of the request being served, set by the HTTP front doors, read by record().
current_request_id: contextvars.ContextVar[str] = contextvars.ContextVar(
    "mcptasks_request_id", default=""
)


@dataclass(frozen=True)
class Actor:
    """Who caused a change: ``kind`` is principal / user / operator / system."""

    kind: str
    user_id: int | None = None
    display: str = ""

    @classmethod
    def system(cls, display: str = "system") -> Actor:
        return cls(kind="system", display=display)

    @classmethod
    def for_user(cls, user: Any, kind: str = "user") -> Actor:
        return cls(kind=kind, user_id=user.pk, display=user.get_username())


def record(
    *,
    action: str,
    actor: Actor,
    tenant_id: int | None,
    tenant_slug: str | None,
    task_id: str = "",
    data: dict[str, Any] | None = None,
    sensitive_keys: frozenset[str] | set[str] = frozenset(),
    request_id: str | None = None,
    inline: bool = False,
) -> AuditEvent:
    """Write one event of its chain in the current transaction; return it.

    With ``MCPTASKS_AUDIT_SEAL_DELAY_MS`` > 0 (and not ``inline``) the event is inserted
    unsealed — one INSERT, no chain head, no lock — and :mod:`audit.seal` gives it its ``seq``,
    ``prev_hash`` and ``hash`` after commit, within the delay. Otherwise (or with ``inline``,
    for an event whose caller needs its sequence now) it is appended to its chain here: call it
    as the last statement of the writing transaction, since it locks the chain head until the
    commit that follows. The payload is redacted and size-capped.
    """
    fields = _event_fields(
        action, actor, tenant_id, tenant_slug, task_id, data, sensitive_keys, request_id
    )
    chain = fields["chain"]
    if not inline and sealed_later():
        event = AuditEvent(**fields, created_at=timezone.now())
        event.save(force_insert=True)
        seal.wake_after_commit(chain)
        return event
    # No savepoint: an event that cannot be written must undo the change it records, so a
    # failure here dooms the enclosing transaction (and two round trips are saved).
    with transaction.atomic(savepoint=False):
        known = _heads.get(chain) if connection.vendor == "postgresql" else None
        if known is not None:
            # The head this process last wrote or read: linked to it and written only if it is
            # still the head (compare and set). One statement; on a miss, the locked read.
            event, linked = _linked(fields, *known)
            if _append(event, expected=known):
                _heads[chain] = linked
                return event
        head = _locked_head(chain)
        event, linked = _linked(fields, head.seq, head.hash)
        _append(event)
        _heads[chain] = linked
    return event


def sealed_later() -> bool:
    """Are events inserted unsealed and sealed after commit (``MCPTASKS_AUDIT_SEAL_DELAY_MS``)?"""
    return bool(settings.MCPTASKS_AUDIT_SEAL_DELAY_MS > 0)


def _event_fields(
    action: str,
    actor: Actor,
    tenant_id: int | None,
    tenant_slug: str | None,
    task_id: str,
    data: dict[str, Any] | None,
    sensitive_keys: frozenset[str] | set[str],
    request_id: str | None,
) -> dict[str, Any]:
    """An event's fields but its time and its place in the chain, the payload redacted."""
    payload = redact(
        data or {}, sensitive_keys=sensitive_keys, max_bytes=settings.MCPTASKS_AUDIT_MAX_DATA_BYTES
    )
    return {
        "chain": chain_for_tenant(tenant_slug),
        "tenant_id": tenant_id,
        "actor_kind": actor.kind,
        "actor_id": str(actor.user_id or ""),
        "actor_display": actor.display,
        "action": action,
        "task_id": task_id,
        "data": payload,
        "request_id": request_id if request_id is not None else current_request_id.get(),
    }


@dataclass(frozen=True)
class Unsealed:
    """An event for the caller's own statement to insert unsealed (issue 23): a writer that
    already sends one statement for its change inserts the event in the same statement, one
    round trip and one transaction for both (``INSERT INTO … (columns) SELECT params …``).
    Once that statement has run, :meth:`written` records the event's id and has the sealer
    seal its chain after commit, as :func:`record` does for an event it inserts itself."""

    event: AuditEvent

    @staticmethod
    @functools.cache
    def columns() -> str:
        """The table and its inserted columns: ``"audit_auditevent" ("chain", …)``."""
        quote = connection.ops.quote_name
        names = ", ".join(quote(str(f.column)) for f in _unsealed_fields())
        return f"{quote(AuditEvent._meta.db_table)} ({names})"

    @staticmethod
    @functools.cache
    def placeholders(data: str = "%s", chain: str = "%s") -> str:
        """One ``%s`` per column of :meth:`columns`; ``data``, ``chain``: the SQL of those
        columns' values (each binding its one parameter)."""
        sql = {"data": data, "chain": chain}
        return ", ".join(sql.get(f.name, "%s") for f in _unsealed_fields())

    def params(self, chain: str | None = None) -> list[Any]:
        """The values of :meth:`columns`, prepared as the ORM prepares them, in that order;
        ``chain``: what to bind for the ``chain`` column instead of the event's."""
        return [
            chain
            if chain is not None and f.name == "chain"
            else f.get_db_prep_save(f.pre_save(self.event, True), connection)
            for f in _unsealed_fields()
        ]

    def written(self, pk: int) -> AuditEvent:
        self.event.pk = pk
        self.event._state.adding, self.event._state.db = False, connection.alias
        seal.wake_after_commit(self.event.chain)
        return self.event


@functools.cache
def _unsealed_fields() -> tuple[Field[Any, Any], ...]:
    return tuple(f for f in AuditEvent._meta.concrete_fields if not f.primary_key)


def unsealed(
    *,
    action: str,
    actor: Actor,
    tenant_id: int | None,
    tenant_slug: str | None,
    task_id: str = "",
    data: dict[str, Any] | None = None,
    sensitive_keys: frozenset[str] | set[str] = frozenset(),
    request_id: str | None = None,
) -> Unsealed | None:
    """The event :func:`record` would write, for the caller's statement to insert; None when
    events are sealed inline (then only :func:`record` may write it: it needs the chain head)."""
    if not sealed_later():
        return None
    fields = _event_fields(
        action, actor, tenant_id, tenant_slug, task_id, data, sensitive_keys, request_id
    )
    return Unsealed(AuditEvent(**fields, created_at=timezone.now()))


def insert_unsealed(events: Sequence[Unsealed]) -> None:
    """Insert ``events`` (each from :func:`unsealed`) in one statement, in the current
    transaction, and have their chains sealed after commit: :func:`record` of many events at
    once, for a writer that records one event for each of many rows."""
    if not events:
        return
    AuditEvent.objects.bulk_create([unsealed_event.event for unsealed_event in events])
    for chain in sorted({unsealed_event.event.chain for unsealed_event in events}):
        seal.wake_after_commit(chain)


# chain -> (seq, hash) of its head as this process last saw it: a guess, checked by the write.
_heads: dict[str, tuple[int, str]] = {}


def _linked(fields: dict[str, Any], seq: int, prev_hash: str) -> tuple[AuditEvent, tuple[int, str]]:
    """The event that follows the head ``(seq, prev_hash)`` of its chain, created now (after
    that head was written: times follow the chain's order), and the head it makes."""
    now = timezone.now()
    body = event_body(seq=seq + 1, created_at=now.isoformat(), **fields)
    digest = link_hash(prev_hash, body)
    event = AuditEvent(**fields, created_at=now, seq=seq + 1, prev_hash=prev_hash, hash=digest)
    return event, (seq + 1, digest)


def _locked_head(chain: str) -> ChainHead:
    """The chain's head row, locked until commit; created by the chain's first event."""
    head = ChainHead.objects.select_for_update().filter(chain=chain).first()
    if head is None:
        ChainHead.objects.get_or_create(chain=chain)  # a concurrent first event may win
        head = ChainHead.objects.select_for_update().get(chain=chain)
    return head


def _append(event: AuditEvent, expected: tuple[int, str] | None = None) -> bool:
    """Insert ``event`` and move its chain's head to it; return whether it was written.

    Without ``expected`` the head is locked by the caller. With it (PostgreSQL), the head moves
    only if it still is ``expected`` — ``(seq, hash)``: the head's UPDATE waits for a concurrent
    writer's commit and then finds a new head — and the event is inserted only if it moved, so
    a chain never forks; the UPDATE holds the head's lock until commit, as the locked read
    does."""
    if connection.vendor != "postgresql":
        event.save(force_insert=True)
        ChainHead.objects.filter(chain=event.chain).update(
            seq=event.seq, hash=event.hash, updated_at=event.created_at
        )
        return True
    # One statement on PostgreSQL: every writer of the tenant waits on the head lock, which is
    # held from the head's read (or its compare and set) to the COMMIT, so each round trip
    # less under it counts.
    sql, fields = _append_statement(compare=expected is not None)
    updated_at = ChainHead._meta.get_field("updated_at").get_db_prep_save(
        event.created_at, connection
    )
    values = [f.get_db_prep_save(getattr(event, f.attname), connection) for f in fields]
    with connection.cursor() as cursor:
        cursor.execute(
            sql, [event.seq, event.hash, updated_at, event.chain, *(expected or ()), *values]
        )
        row = cursor.fetchone()
    if row is None:
        return False
    event.pk = row[0]
    event._state.adding = False
    event._state.db = connection.alias
    return True


@functools.cache
def _append_statement(compare: bool = False) -> tuple[str, list[Field[Any, Any]]]:
    """The PostgreSQL statement of _append and the event fields whose values it binds; with
    ``compare``, the head's move is conditional on its ``seq`` and ``hash`` (bound after the
    chain) and the event's insert on that move."""
    quote = connection.ops.quote_name
    fields = [f for f in AuditEvent._meta.concrete_fields if not f.primary_key]
    condition = " AND seq = %s AND hash = %s" if compare else ""
    placeholders = ", ".join(["%s"] * len(fields))
    source = f"SELECT {placeholders} FROM head" if compare else f"VALUES ({placeholders})"  # noqa: S608
    sql = (
        f"WITH head AS (UPDATE {quote(ChainHead._meta.db_table)} "  # noqa: S608 - names from the models
        f"SET seq = %s, hash = %s, updated_at = %s WHERE chain = %s{condition} RETURNING 1) "
        f"INSERT INTO {quote(AuditEvent._meta.db_table)} "
        f"({', '.join(quote(str(f.column)) for f in fields)}) {source} RETURNING id"
    )
    return sql, fields
