"""OAuth 2.0 resource-server parts (PROTOCOL §1.7): Protected Resource Metadata (RFC 9728) and
validation of JWT access tokens from an external authorization server."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import jwt
from django.conf import settings
from django.contrib.auth import get_user_model
from django.http import HttpRequest, JsonResponse

from mcptasks.models import Membership, Tenant

SCOPES = ["mcp", "mcp:tools", "mcp:tasks", "api"]
PRM_PATH = "/.well-known/oauth-protected-resource"


def resource_metadata_url() -> str:
    return f"{settings.MCPTASKS_PUBLIC_URL}{PRM_PATH}/mcp"


def protected_resource_metadata(request: HttpRequest) -> JsonResponse:
    return JsonResponse(
        {
            "resource": f"{settings.MCPTASKS_PUBLIC_URL}/mcp",
            "authorization_servers": settings.MCPTASKS_AUTHORIZATION_SERVERS,
            "scopes_supported": SCOPES,
            "bearer_methods_supported": ["header"],
            "resource_name": "mcptasks",
        }
    )


class JwtRejected(Exception):
    """The JWT is invalid; the message says why (safe to show)."""


def jwt_configured() -> bool:
    return bool(
        settings.MCPTASKS_JWT_ISSUER
        and (settings.MCPTASKS_JWT_JWKS_URL or settings.MCPTASKS_JWT_JWKS_FILE)
    )


@lru_cache(maxsize=1)
def _jwks_client() -> jwt.PyJWKClient:
    return jwt.PyJWKClient(settings.MCPTASKS_JWT_JWKS_URL, cache_keys=True, lifespan=300)


def _signing_key(token: str) -> Any:
    if settings.MCPTASKS_JWT_JWKS_URL:
        return _jwks_client().get_signing_key_from_jwt(token).key
    keys = jwt.PyJWKSet.from_dict(json.loads(Path(settings.MCPTASKS_JWT_JWKS_FILE).read_text()))
    kid = jwt.get_unverified_header(token).get("kid")
    for key in keys.keys:
        if kid is None or key.key_id == kid:
            return key.key
    raise JwtRejected("no key in the JWKS matches the token's kid")


def validate_jwt(token: str) -> tuple[Any, Tenant, list[str], datetime]:
    """Return ``(user, tenant, scopes, expires_at)`` for a valid access token; raise
    JwtRejected. ``expires_at`` (its ``exp``) also ends a listen stream opened with it.

    Checks signature, issuer, audience (this server's canonical URI, RFC 8707), expiry; maps
    the configured claims to an existing user who is a member of the named tenant.
    """
    try:
        claims = jwt.decode(
            token,
            _signing_key(token),
            algorithms=settings.MCPTASKS_JWT_ALGORITHMS,
            audience=settings.MCPTASKS_JWT_AUDIENCE,
            issuer=settings.MCPTASKS_JWT_ISSUER,
            options={"require": ["exp", "iss", "aud"]},
        )
    except jwt.ExpiredSignatureError:
        raise JwtRejected("the access token has expired") from None
    except jwt.InvalidAudienceError:
        raise JwtRejected("the access token was not issued for this server") from None
    except jwt.InvalidIssuerError:
        raise JwtRejected("the access token has an unexpected issuer") from None
    except (jwt.PyJWTError, ValueError) as exc:
        raise JwtRejected(f"the access token is invalid ({type(exc).__name__})") from None
    username = claims.get(settings.MCPTASKS_JWT_USER_CLAIM)
    tenant_slug = claims.get(settings.MCPTASKS_JWT_TENANT_CLAIM)
    if not isinstance(username, str) or not isinstance(tenant_slug, str):
        raise JwtRejected("the access token lacks the user or tenant claim")
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    tenant = Tenant.objects.filter(slug=tenant_slug).first()
    if (
        user is None
        or tenant is None
        or not Membership.objects.filter(user=user, tenant=tenant).exists()
    ):
        raise JwtRejected("the access token's subject is not a member of its tenant")
    raw_scopes = claims.get("scope", claims.get("scp", ""))
    scopes = raw_scopes.split() if isinstance(raw_scopes, str) else list(raw_scopes or [])
    return user, tenant, scopes, datetime.fromtimestamp(int(claims["exp"]), tz=UTC)
