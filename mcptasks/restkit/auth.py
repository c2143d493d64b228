"""DRF authentication with the MCP API tokens (``Authorization: Bearer mcpt_…``)."""

from __future__ import annotations

from typing import Any

from rest_framework import authentication, exceptions
from rest_framework.request import Request

from mcptasks.auth import AuthError, authenticate_bearer

API_SCOPE = "api"


class BearerTokenAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header.lower().startswith("bearer "):
            return None
        try:
            principal = authenticate_bearer(header, scope=API_SCOPE)
        except AuthError as exc:
            if exc.status == 403:
                raise exceptions.PermissionDenied(exc.description) from None
            raise exceptions.AuthenticationFailed(exc.description) from None
        return principal.user, principal

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="mcptasks-api"'
