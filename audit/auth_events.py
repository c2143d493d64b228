"""Audit of dashboard and admin logins: ``auth.login``, ``auth.logout``, ``auth.login_failed``.

Called by the receivers of Django's auth signals (audit/apps.py): Django's login views emit
them, so a signal is the one doorway here. A user's event goes to the chain of every tenant the
user belongs to (an operator of acme and globex shows in both trails), sorted so that two
writers lock chain heads in the same order; a user with no tenant, and a failed login for an
unknown username, go to the ``system`` chain.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from audit.record import Actor, record
from audit.redact import redact_text
from mcptasks import limits
from mcptasks.client_ip import client_ip

security_log = logging.getLogger("mcptasks.security")

LOGIN = "auth.login"
LOGOUT = "auth.logout"
LOGIN_FAILED = "auth.login_failed"


def _client(request: Any) -> dict[str, Any]:
    if request is None:
        return {}
    meta = getattr(request, "META", {})
    return {
        "ip": client_ip(request),
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


def _repeat_worth_recording(count: int) -> bool:
    """The 1st, 10th, 100th… failure of a window is recorded, with its count."""
    while count >= 10 and count % 10 == 0:
        count //= 10
    return count == 1


def record_login_failed(*, credentials: dict[str, Any], request: Any = None) -> None:
    """Record a failed login: in the user's tenant chains when the username is known, else in
    the ``system`` chain. Only the username is kept (Django already masked the password).

    Repeats are aggregated, so guessing cannot grow a chain without bound: per known user, or
    per client address for unknown usernames, only the 1st, 10th, 100th… failure within
    ``MCPTASKS_LOGIN_FAILED_AUDIT_WINDOW_S`` is recorded, carrying ``failures`` (the count so
    far in the window); the system chain takes at most ``MCPTASKS_LOGIN_FAILED_AUDIT_SYSTEM_MAX``
    events per window, the rest go to the security log only."""
    user_model = get_user_model()
    username = str(credentials.get(user_model.USERNAME_FIELD) or credentials.get("username") or "")
    client = _client(request)
    user = (
        user_model._default_manager.filter(**{user_model.USERNAME_FIELD: username}).first()
        if username
        else None
    )
    window = settings.MCPTASKS_LOGIN_FAILED_AUDIT_WINDOW_S
    who = f"user:{user.pk}" if user is not None else "system"
    failures = limits.buckets().count(f"login_failed:{who}:{client.get('ip', '')}", window)
    if failures and not _repeat_worth_recording(failures):
        return
    data = {"username": redact_text(username)[:150], **client, "failures": failures or 1}
    data["window_s"] = window
    if user is None:
        recorded = limits.buckets().count("login_failed:system", window)
        if recorded > settings.MCPTASKS_LOGIN_FAILED_AUDIT_SYSTEM_MAX:
            security_log.warning(
                "failed login not audited: the system chain's budget for this window is spent",
                extra={"event": "security.login_failed_unaudited", "ip": client.get("ip", "")},
            )
            return
        record(
            action=LOGIN_FAILED,
            actor=Actor(kind="anonymous", display=data["username"]),
            tenant_id=None,
            tenant_slug=None,
            data=data,
        )
        return
    _record_for_user(LOGIN_FAILED, user, Actor(kind="anonymous", display=user.get_username()), data)
