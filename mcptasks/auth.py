"""Bearer-token authentication of MCP requests (the principal is the token's user and tenant)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, connections, transaction

from mcptasks.models import ApiToken, Membership, Role, Task, Tenant, scope_covers
from mcptasks.oauth import JwtRejected, jwt_configured, validate_jwt
from mcptasks.rowplan import RowPlan

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
    row = _load_token_row(lookup)
    if row is None:
        raise AuthError(401, "invalid_token", "The token is invalid")
    token = row.token
    verify_token(token, secret, scope)  # the user is active
    if not row.member:  # read in the token's own row, no second statement
        raise AuthError(401, "invalid_token", NOT_A_MEMBER)
    token.touch()
    return Principal(user=token.user, tenant=token.tenant, token=token)


def _load_token_row(lookup: str) -> TokenRow | None:
    """The token with its user and tenant and whether its owner is a member of that tenant
    (:func:`token_row_plan`), by its lookup: one statement."""
    plan = token_row_plan(connection.alias)
    with connection.cursor() as cursor:
        cursor.execute(plan.statement, plan.params(lookup))
        row = cursor.fetchone()
    return None if row is None else plan.objects(row)


def _load_token(lookup: str) -> ApiToken | None:
    """The token with its user and tenant, by its lookup."""
    row = _load_token_row(lookup)
    return None if row is None else row.token


@dataclass(frozen=True)
class TokenRow:
    """A token row as objects: the token (its ``user`` and ``tenant`` set), whether the token's
    owner is a member of the token's tenant, and with a task joined their task (None when the id
    names no task of theirs there)."""

    token: ApiToken
    member: bool = False
    task: Task | None = None


@dataclass(frozen=True)
class TokenRowPlan:
    """The one statement that loads a token with its principal and tenant — what
    ``ApiToken.objects.select_related("user", "tenant").filter(lookup=...)`` loads, without
    compiling that query per request — with the owner's membership of the token's tenant, and
    how its row becomes objects. The fast ``tasks/get`` (mcptasks/mcp/fast_get.py) joins the
    owner's task to the same row."""

    statement: str
    parts: tuple[RowPlan, ...]  # token, user, tenant[, task]
    alias: str

    @property
    def joins_task(self) -> bool:
        return len(self.parts) == 4

    def params(self, lookup: str, task_id: str | None = None) -> list[str]:
        return [task_id, lookup] if self.joins_task else [lookup]  # type: ignore[list-item]

    def objects(self, row: Sequence[Any]) -> TokenRow:
        start, loaded = 0, []
        for part in self.parts[:3]:
            loaded.append(part.instance(row[start : start + len(part.columns)]))
            start += len(part.columns)
        token, user, tenant = loaded
        token.user, token.tenant = user, tenant
        member = bool(row[start])
        if not self.joins_task:
            return TokenRow(token, member=member)
        values = row[start + 1 :]
        task = None if values[0] is None else self.parts[3].instance(values)
        return TokenRow(token, member=member, task=task)


@dataclass(frozen=True)
class RowFields:
    """Which fields of each model a :class:`TokenRowPlan` loads (None: all of them; the others
    are deferred), and of the owner's task, if it joins one."""

    token: frozenset[str] | None = None
    user: frozenset[str] | None = None
    tenant: frozenset[str] | None = None
    task: frozenset[str] = frozenset()


@functools.cache
def token_row_plan(alias: str, fields: RowFields = RowFields()) -> TokenRowPlan:
    """The plan on database ``alias``: the token, its owner, its tenant and whether the owner is
    a member of that tenant; with ``fields.task``, those fields of their own task there (bound
    first: ``plan.params``)."""
    db = connections[alias]
    user_model = get_user_model()
    parts: list[RowPlan] = []
    tables: list[tuple[Any, str, frozenset[str] | None]] = [
        (ApiToken, "t", fields.token),
        (user_model, "u", fields.user),
        (Tenant, "n", fields.tenant),
    ]
    for model, alias_, names in tables:
        parts.append(RowPlan.of(model, alias_, names=names, db=db))
    columns = [column for part in parts for column in part.columns]
    # Is the token's owner still a member of its tenant (a token acts only while they are)?
    columns.append(
        f'EXISTS (SELECT 1 FROM "{Membership._meta.db_table}" m '  # noqa: S608
        f'WHERE m."user_id" = t."user_id" AND m."tenant_id" = t."tenant_id")'
    )
    joins = ""
    if fields.task:
        parts.append(RowPlan.of(Task, "k", names=fields.task, db=db))
        columns += parts[-1].columns
        # Only the token owner's own task in the token's tenant is read: a foreign task's row
        # is never fetched, so "not yours" and "not there" cost this statement the same.
        joins = (
            f'LEFT JOIN "{Task._meta.db_table}" k ON k."id" = %s '
            f'AND k."principal_id" = t."user_id" AND k."tenant_id" = t."tenant_id" '
        )
    user_pk = user_model._meta.pk.column  # type: ignore[union-attr]
    # Identifiers come from model metadata; the values are bound parameters.
    statement = (
        f"SELECT {', '.join(columns)} "  # noqa: S608
        f'FROM "{ApiToken._meta.db_table}" t '
        f'JOIN "{user_model._meta.db_table}" u ON u."{user_pk}" = t."user_id" '
        f'JOIN "{Tenant._meta.db_table}" n ON n."id" = t."tenant_id" '
        f"{joins}"
        f'WHERE t."lookup" = %s'
    )
    return TokenRowPlan(statement=statement, parts=tuple(parts), alias=alias)


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
