"""The one writer of audit events (DESIGN §7)."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
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
        event = AuditEvent.objects.create(
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
        ChainHead.objects.filter(chain=chain).update(seq=seq, hash=digest, updated_at=now)
    return event


def _locked_head(chain: str) -> ChainHead:
    """The chain's head row, locked until commit; created by the chain's first event."""
    head = ChainHead.objects.select_for_update().filter(chain=chain).first()
    if head is None:
        ChainHead.objects.get_or_create(chain=chain)  # a concurrent first event may win
        head = ChainHead.objects.select_for_update().get(chain=chain)
    return head
