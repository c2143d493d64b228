"""The one writer of audit events (DESIGN §7)."""

from __future__ import annotations

import contextvars
import functools
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Field
from django.utils import timezone

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
) -> AuditEvent:
    """Append one event to its chain in the current transaction; return it.

    Call it as the last statement of the writing transaction: it locks the chain head, so the
    lock is held only until the commit that follows. The payload is redacted and size-capped.
    """
    chain = chain_for_tenant(tenant_slug)
    payload = redact(
        data or {}, sensitive_keys=sensitive_keys, max_bytes=settings.MCPTASKS_AUDIT_MAX_DATA_BYTES
    )
    # No savepoint: an event that cannot be written must undo the change it records, so a
    # failure here dooms the enclosing transaction (and two round trips are saved).
    with transaction.atomic(savepoint=False):
        head = _locked_head(chain)
        now = timezone.now()
        seq = head.seq + 1
        body = event_body(
            chain=chain,
            seq=seq,
            created_at=now.isoformat(),
            tenant_id=tenant_id,
            actor_kind=actor.kind,
            actor_id=str(actor.user_id or ""),
            actor_display=actor.display,
            action=action,
            task_id=task_id,
            data=payload,
            request_id=request_id if request_id is not None else current_request_id.get(),
        )
        digest = link_hash(head.hash, body)
        event = AuditEvent(
            chain=chain,
            seq=seq,
            created_at=now,
            tenant_id=tenant_id,
            actor_kind=body["actor_kind"],
            actor_id=body["actor_id"],
            actor_display=body["actor_display"],
            action=action,
            task_id=task_id,
            data=payload,
            request_id=body["request_id"],
            prev_hash=head.hash,
            hash=digest,
        )
        _append(event)
    return event


def _locked_head(chain: str) -> ChainHead:
    """The chain's head row, locked until commit; created by the chain's first event."""
    head = ChainHead.objects.select_for_update().filter(chain=chain).first()
    if head is None:
        ChainHead.objects.get_or_create(chain=chain)  # a concurrent first event may win
        head = ChainHead.objects.select_for_update().get(chain=chain)
    return head


def _append(event: AuditEvent) -> None:
    """Insert ``event`` and move its chain's head to it (the head is locked by the caller)."""
    if connection.vendor != "postgresql":
        event.save(force_insert=True)
        ChainHead.objects.filter(chain=event.chain).update(
            seq=event.seq, hash=event.hash, updated_at=event.created_at
        )
        return
    # One statement on PostgreSQL: every writer of the tenant waits on the head lock, which is
    # held from _locked_head to the COMMIT, so each round trip less under it counts.
    sql, fields = _append_statement()
    updated_at = ChainHead._meta.get_field("updated_at").get_db_prep_save(
        event.created_at, connection
    )
    values = [f.get_db_prep_save(getattr(event, f.attname), connection) for f in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, [event.seq, event.hash, updated_at, event.chain, *values])
        event.pk = cursor.fetchone()[0]
    event._state.adding = False
    event._state.db = connection.alias


@functools.cache
def _append_statement() -> tuple[str, list[Field[Any, Any]]]:
    """The PostgreSQL statement of _append and the event fields whose values it binds."""
    quote = connection.ops.quote_name
    fields = [f for f in AuditEvent._meta.concrete_fields if not f.primary_key]
    sql = (
        f"WITH head AS (UPDATE {quote(ChainHead._meta.db_table)} "  # noqa: S608 - names from the models
        "SET seq = %s, hash = %s, updated_at = %s WHERE chain = %s) "
        f"INSERT INTO {quote(AuditEvent._meta.db_table)} "
        f"({', '.join(quote(str(f.column)) for f in fields)}) "
        f"VALUES ({', '.join(['%s'] * len(fields))}) RETURNING id"
    )
    return sql, fields
