"""Login throttling: django-axes, wired for this project (README "Security").

After ``MCPTASKS_LOGIN_FAILURE_LIMIT`` failed logins of one username from one client address
(``mcptasks.client_ip``), further attempts — the right password included — are refused with 429
for ``MCPTASKS_LOGIN_LOCKOUT_S``; a successful login resets the count.
"""

from __future__ import annotations

from typing import Any

from axes.backends import AxesStandaloneBackend


class LoginThrottleBackend(AxesStandaloneBackend):
    """django-axes' lockout check for logins made by a web request (the dashboard's and the
    admin's login forms). ``authenticate()`` without a request — a management command, a test
    client's ``login()`` — has no client to throttle and is left to the next backend."""

    def authenticate(
        self,
        request: Any,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> Any:
        if request is None:
            return None
        return super().authenticate(request, username, password, **kwargs)
