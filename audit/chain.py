"""Hash-chain arithmetic shared by the writer and the verifier."""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785

GENESIS_HASH = "0" * 64
SYSTEM_CHAIN = "system"


def chain_for_tenant(tenant_slug: str | None) -> str:
    return f"tenant:{tenant_slug}" if tenant_slug else SYSTEM_CHAIN


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
