"""Bearer-token authentication of MCP requests (the principal is the token's user and tenant)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction

from mcptasks import access
from mcptasks.models import ApiToken, Membership, Role, Tenant, scope_covers
from mcptasks.oauth import JwtRejected, jwt_configured, validate_jwt

MCP_SCOPE = "mcp"
CONFORMANCE_USER = "conformance"
NOT_A_MEMBER = "The token's owner is no longer a member of its tenant"


@dataclass(frozen=True)
class Principal:
    user: Any
    tenant: Tenant
    token: ApiToken | None
    # A JWT's expiry (an API token's own is re-read from its row while a stream is open).
    expires_at: datetime | None = None

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
    token = _load_token(lookup)
    if token is None:
        raise AuthError(401, "invalid_token", "The token is invalid")
    verify_token(token, secret, scope)
    if not access.holds_membership(token.user, token.tenant_id):
        raise AuthError(401, "invalid_token", NOT_A_MEMBER)
    token.touch()
    return Principal(user=token.user, tenant=token.tenant, token=token)


def _load_token(lookup: str) -> ApiToken | None:
    """The token with its user and tenant, in one prepared statement: what
    ``ApiToken.objects.select_related("user", "tenant").filter(lookup=lookup).first()`` loads,
    without compiling that query on every request."""
    statement, parts = _token_statement(connection.alias)
    with connection.cursor() as cursor:
        cursor.execute(statement, [lookup])
        row = cursor.fetchone()
    if row is None:
        return None
    loaded, start = [], 0
    for model, attnames, converters in parts:
        values = list(row[start : start + len(attnames)])
        start += len(attnames)
        for index, convert in converters:
            values[index] = convert(values[index])
        loaded.append(model.from_db(connection.alias, attnames, values))
    token, user, tenant = loaded
    token.user, token.tenant = user, tenant
    return token  # type: ignore[no-any-return]


@functools.cache
def _token_statement(alias: str) -> tuple[str, list[tuple[Any, list[str], list[Any]]]]:
    """The statement, and per model its field names and the converters the ORM would apply to
    each column (the backend's, then the field's) — as ``SQLCompiler.get_converters`` does."""
    user_model = get_user_model()
    tables: list[tuple[Any, str]] = [(ApiToken, "t"), (user_model, "u"), (Tenant, "n")]
    columns, parts = [], []
    for model, alias_ in tables:
        fields = list(model._meta.concrete_fields)
        converters = []
        for index, field in enumerate(fields):
            col = field.get_col(alias_)
            chain = connection.ops.get_db_converters(col) + col.get_db_converters(connection)
            if chain:
                converters.append((index, _converter(chain, col)))
        columns += [f'{alias_}."{field.column}"' for field in fields]
        parts.append((model, [field.attname for field in fields], converters))
    user_pk = user_model._meta.pk.column  # type: ignore[union-attr]
    # Identifiers come from model metadata; the lookup is a bound parameter.
    statement = (
        f"SELECT {', '.join(columns)} "  # noqa: S608
        f'FROM "{ApiToken._meta.db_table}" t '
        f'JOIN "{user_model._meta.db_table}" u ON u."{user_pk}" = t."user_id" '
        f'JOIN "{Tenant._meta.db_table}" n ON n."id" = t."tenant_id" '
        f'WHERE t."lookup" = %s'
    )
    return statement, parts


def _converter(chain: list[Any], col: Any) -> Any:
    def convert(value: Any) -> Any:
        for step in chain:
            value = step(value, col, connection)
        return value

    return convert


def verify_token(token: ApiToken, secret: str, scope: str) -> None:
    """Raise AuthError unless ``secret`` is the token's, the token and its user are active and
    it holds ``scope``. Runs no query (``token.user`` must be loaded)."""
    if not token.matches(secret):
        raise AuthError(401, "invalid_token", "The token is invalid")
    if not token.is_active() or not token.user.is_active:
        raise AuthError(401, "invalid_token", "The token is expired or revoked")
    if not token.has_scope(scope):
        raise AuthError(403, "insufficient_scope", f"The token lacks the {scope!r} scope", scope)


def _principal_from_jwt(token: str, scope: str) -> Principal:
    try:
        user, tenant, scopes, expires_at = validate_jwt(token)
    except JwtRejected as exc:
        raise AuthError(401, "invalid_token", f"Invalid access token: {exc}") from None
    if not scope_covers(scopes, scope):
        raise AuthError(403, "insufficient_scope", f"The token lacks the {scope!r} scope", scope)
    return Principal(user=user, tenant=tenant, token=None, expires_at=expires_at)


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
