"""Issuing and revoking API tokens, audited in the same transaction (STYLE rule 7)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from audit.record import Actor, record
from mcptasks.models import ApiToken, Tenant


def _token_data(token: ApiToken) -> dict[str, Any]:
    """What the audit trail keeps of a token: never the secret or its hash."""
    return {
        "id": token.pk,
        "lookup": token.lookup,
        "name": token.name,
        "owner": token.user.get_username(),
        "owner_id": token.user.pk,
        "issued_by_id": token.issued_by_id,
        "scopes": list(token.scopes),
        "expires_at": token.expires_at.isoformat() if token.expires_at else None,
    }


def issue_token(
    *,
    user: Any,
    tenant: Tenant,
    actor: Actor,
    name: str = "",
    scopes: list[str] | None = None,
    expires_at: datetime | None = None,
    issued_by: Any = None,
) -> tuple[ApiToken, str]:
    """Create a token for ``user`` in ``tenant``, issued by ``issued_by`` (the person acting;
    default ``user``), and record ``token.issued``.

    Returns the token and its plaintext, which is shown once and never stored. Authorizing the
    issue is the caller's job (access.py).
    """
    with transaction.atomic():
        token, plaintext = ApiToken.issue(
            user=user,
            tenant=tenant,
            name=name,
            scopes=scopes,
            expires_at=expires_at,
            issued_by=issued_by,
        )
        record(
            action="token.issued",
            actor=actor,
            tenant_id=tenant.pk,
            tenant_slug=tenant.slug,
            data=_token_data(token),
        )
    return token, plaintext


def revoke_token(*, token_id: int, actor: Actor, reason: str = "") -> ApiToken:
    """Revoke a token and record ``token.revoked``; revoking a revoked token changes nothing
    and records nothing. Raises ``ApiToken.DoesNotExist``."""
    with transaction.atomic():
        now = timezone.now()
        revoked = ApiToken.objects.filter(pk=token_id, revoked_at__isnull=True).update(
            revoked_at=now
        )
        token = ApiToken.objects.select_related("tenant", "user").get(pk=token_id)
        if revoked:
            record(
                action="token.revoked",
                actor=actor,
                tenant_id=token.tenant_id,
                tenant_slug=token.tenant.slug,
                data={**_token_data(token), "reason": reason},
            )
    return token
