from __future__ import annotations

from typing import Any

from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Django's auth emits these signals and nothing else reports a login, so this is the one
        # place a signal is right; the receivers only call audit.auth_events.
        from django.contrib.auth import signals

        signals.user_logged_in.connect(_on_login, dispatch_uid="audit.auth.login")
        signals.user_logged_out.connect(_on_logout, dispatch_uid="audit.auth.logout")
        signals.user_login_failed.connect(_on_login_failed, dispatch_uid="audit.auth.failed")


def _on_login(sender: Any, request: Any = None, user: Any = None, **kwargs: Any) -> None:
    from audit.auth_events import record_login

    record_login(user=user, request=request)


def _on_logout(sender: Any, request: Any = None, user: Any = None, **kwargs: Any) -> None:
    from audit.auth_events import record_logout

    record_logout(user=user, request=request)


def _on_login_failed(
    sender: Any, credentials: Any = None, request: Any = None, **kwargs: Any
) -> None:
    from audit.auth_events import record_login_failed

    record_login_failed(credentials=credentials or {}, request=request)
