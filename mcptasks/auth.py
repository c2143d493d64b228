"""Bearer-token authentication of MCP requests (the principal is the token's user and tenant)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from mcptasks.models import ApiToken, Membership, Role, Tenant
from mcptasks.oauth import JwtRejected, jwt_configured, validate_jwt

MCP_SCOPE = "mcp"
CONFORMANCE_USER = "conformance"


@dataclass(frozen=True)
class Principal:
    user: Any
    tenant: Tenant
    token: ApiToken | None

    @property
    def token_id(self) -> int | None:
        return self.token.pk if self.token is not None else None


class AuthError(Exception):
    """401 (``invalid_token``) or 403 (``insufficient_scope``) with a WWW-Authenticate challenge."""

    def __init__(self, status: int, error: str, description: str, scope: str = MCP_SCOPE) -> None:
        super().__init__(description)
        self.status, self.error, self.description, self.scope = status, error, description, scope


def authenticate_bearer(authorization: str | None, *, scope: str = MCP_SCOPE) -> Principal:
    """Resolve ``Authorization: Bearer <token>`` to a principal or raise AuthError."""
    if not authorization:
        if settings.MCPTASKS_CONFORMANCE_MODE:
            return conformance_principal()
        raise AuthError(401, "invalid_request", "A bearer token is required")
    kind, _, credential = authorization.partition(" ")
    if kind.lower() != "bearer" or not credential.strip():
        raise AuthError(401, "invalid_request", "Use the Authorization: Bearer <token> scheme")
    parts = ApiToken.split(credential.strip())
    if parts is None:
        if jwt_configured():
            return _principal_from_jwt(credential.strip(), scope)
        raise AuthError(401, "invalid_token", "The token is malformed")
    lookup, secret = parts
    token = ApiToken.objects.select_related("user", "tenant").filter(lookup=lookup).first()
    if token is None:
        raise AuthError(401, "invalid_token", "The token is invalid")
    verify_token(token, secret, scope)
    token.touch()
    return Principal(user=token.user, tenant=token.tenant, token=token)


def verify_token(token: ApiToken, secret: str, scope: str) -> None:
    """Raise AuthError unless ``secret`` is the token's, the token and its user are active and
    it holds ``scope``. Runs no query (``token.user`` must be loaded)."""
    if not token.matches(secret):
        raise AuthError(401, "invalid_token", "The token is invalid")
    if not token.is_active() or not token.user.is_active:
        raise AuthError(401, "invalid_token", "The token is expired or revoked")
    if not token.has_scope(scope):
        raise AuthError(403, "insufficient_scope", f"The token lacks the {scope!r} scope", scope)


def scope_covers(held: list[str], scope: str) -> bool:
    """Scopes are hierarchical: ``mcp`` covers ``mcp:tasks``."""
    return any(scope == item or scope.startswith(item + ":") for item in held)


def _principal_from_jwt(token: str, scope: str) -> Principal:
    try:
        user, tenant, scopes = validate_jwt(token)
    except JwtRejected as exc:
        raise AuthError(401, "invalid_token", f"Invalid access token: {exc}") from None
    if not scope_covers(scopes, scope):
        raise AuthError(403, "insufficient_scope", f"The token lacks the {scope!r} scope", scope)
    return Principal(user=user, tenant=tenant, token=None)


_conformance: Principal | None = None


def conformance_principal() -> Principal:
    """The fixed principal of tokenless requests in conformance mode (loopback only)."""
    global _conformance
    if _conformance is None:
        with transaction.atomic():
            tenant, _ = Tenant.objects.get_or_create(
                slug=CONFORMANCE_USER, defaults={"name": "Conformance"}
            )
            user, _ = get_user_model().objects.get_or_create(username=CONFORMANCE_USER)
            Membership.objects.get_or_create(user=user, tenant=tenant, role=Role.MEMBER)
        _conformance = Principal(user=user, tenant=tenant, token=None)
    return _conformance
