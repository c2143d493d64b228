"""Audit of dashboard and admin logins: ``auth.login``, ``auth.logout``, ``auth.login_failed``.

Called by the receivers of Django's auth signals (audit/apps.py): Django's login views emit
them, so a signal is the one doorway here. A user's event goes to the chain of every tenant the
user belongs to (an operator of acme and globex shows in both trails), sorted so that two
writers lock chain heads in the same order; a user with no tenant, and a failed login for an
unknown username, go to the ``system`` chain.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from audit.record import Actor, record
from audit.redact import redact_text

LOGIN = "auth.login"
LOGOUT = "auth.logout"
LOGIN_FAILED = "auth.login_failed"


def _client(request: Any) -> dict[str, Any]:
    if request is None:
        return {}
    meta = getattr(request, "META", {})
    return {
        "ip": meta.get("REMOTE_ADDR", ""),
        "user_agent": redact_text(meta.get("HTTP_USER_AGENT", ""))[:200],
        "path": getattr(request, "path", ""),
    }


def _tenants_of(user: Any) -> list[tuple[int | None, str | None]]:
    from mcptasks.models import Tenant

    tenants = list(
        Tenant.objects.filter(memberships__user=user)
        .distinct()
        .order_by("slug")
        .values_list("pk", "slug")
    )
    return list(tenants) or [(None, None)]


def _record_for_user(action: str, user: Any, actor: Actor, data: dict[str, Any]) -> None:
    with transaction.atomic():
        for tenant_id, tenant_slug in _tenants_of(user):
            record(
                action=action, actor=actor, tenant_id=tenant_id, tenant_slug=tenant_slug, data=data
            )


def record_login(*, user: Any, request: Any = None) -> None:
    """Record a successful login of ``user``."""
    _record_for_user(
        LOGIN, user, Actor.for_user(user), {"username": user.get_username(), **_client(request)}
    )


def record_logout(*, user: Any, request: Any = None) -> None:
    """Record a logout; an anonymous session logging out records nothing."""
    if user is None or not getattr(user, "is_authenticated", False):
        return
    _record_for_user(
        LOGOUT, user, Actor.for_user(user), {"username": user.get_username(), **_client(request)}
    )


def record_login_failed(*, credentials: dict[str, Any], request: Any = None) -> None:
    """Record a failed login: in the user's tenant chains when the username is known, else in
    the ``system`` chain. Only the username is kept (Django already masked the password)."""
    user_model = get_user_model()
    username = str(credentials.get(user_model.USERNAME_FIELD) or credentials.get("username") or "")
    data = {"username": redact_text(username)[:150], **_client(request)}
    user = (
        user_model._default_manager.filter(**{user_model.USERNAME_FIELD: username}).first()
        if username
        else None
    )
    if user is None:
        record(
            action=LOGIN_FAILED,
            actor=Actor(kind="anonymous", display=data["username"]),
            tenant_id=None,
            tenant_slug=None,
            data=data,
        )
        return
    _record_for_user(LOGIN_FAILED, user, Actor(kind="anonymous", display=user.get_username()), data)
