"""Who acts: tenants, memberships (roles), and the API tokens MCP principals present.

Token rows are written by the helpers here (``ApiToken.issue``, ``touch``); ``save()`` carries no
logic (STYLE anti-patterns).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

from mcptasks import db_retry, inputs


class Tenant(models.Model):
    slug = models.SlugField(unique=True, max_length=64)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)
    # Fair share (mcptasks/fairshare.py): caps on this tenant's *running* tasks; empty = the
    # MCPTASKS_MAX_RUNNING_TASKS_PER_* setting, 0 = no cap.
    max_running_tasks = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Running tasks of this tenant at once (empty: the server's setting; 0: no cap)",
    )
    max_running_tasks_per_principal = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Running tasks of one principal of this tenant at once (empty: the setting)",
    )

    def __str__(self) -> str:
        return self.slug


class Role(models.TextChoices):
    MEMBER = "member"
    ADMIN = "admin"
    OPERATOR = "operator"
    AUDITOR = "auditor"


class Membership(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant", "role"], name="membership_unique")
        ]

    def __str__(self) -> str:
        return f"{self.user} {self.role}@{self.tenant}"


TOKEN_PREFIX = "mcpt"


def scope_covers(held: list[str], scope: str) -> bool:
    """Scopes are hierarchical: ``mcp`` covers ``mcp:tasks`` and ``mcp:tools``."""
    return any(scope == item or scope.startswith(item + ":") for item in held)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class ApiToken(models.Model):
    """The MCP principal: a bearer token ``mcpt_<lookup>_<secret>``.

    Only the lookup prefix and the SHA-256 of the 256-bit secret are stored; the plaintext is
    returned once by :meth:`issue`. SHA-256 rather than a password hasher: the secret is random,
    so a slow hash adds nothing but hundreds of ms per request.
    """

    lookup = models.CharField(max_length=16, unique=True)
    secret_hash = models.CharField(max_length=64)
    name = models.CharField(max_length=100, blank=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_tokens")
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    # Who issued it (an admin or operator may issue a token owned by someone else): that person
    # counts as a requester of the tasks it creates (access.requesters). The owner when nobody
    # else is named (a command, a user's own token); None for tokens issued before 0004.
    issued_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )

    DEFAULT_SCOPES = ("mcp",)

    def __str__(self) -> str:
        return f"{TOKEN_PREFIX}_{self.lookup}_… ({self.user})"

    @classmethod
    def issue(
        cls,
        *,
        user: models.Model,
        tenant: Tenant,
        name: str = "",
        scopes: list[str] | None = None,
        expires_at: datetime | None = None,
        issued_by: models.Model | None = None,
    ) -> tuple[ApiToken, str]:
        """Create a token; return it and the plaintext, which is never stored or shown again.
        ``issued_by`` is the person who issued it (default: its owner)."""
        lookup = secrets.token_hex(6)
        secret = secrets.token_urlsafe(32)
        token = cls.objects.create(
            lookup=lookup,
            secret_hash=hash_secret(secret),
            name=name,
            user=user,
            tenant=tenant,
            scopes=list(scopes if scopes is not None else cls.DEFAULT_SCOPES),
            expires_at=expires_at,
            issued_by=issued_by if issued_by is not None else user,
        )
        return token, f"{TOKEN_PREFIX}_{lookup}_{secret}"

    @staticmethod
    def split(plaintext: str) -> tuple[str, str] | None:
        parts = plaintext.split("_", 2)
        if len(parts) != 3 or parts[0] != TOKEN_PREFIX or not parts[1] or not parts[2]:
            return None
        if not inputs.storable(plaintext):
            return None  # a NUL or a lone surrogate: no token's, and no query may hold it
        return parts[1], parts[2]

    def matches(self, secret: str) -> bool:
        return hmac.compare_digest(self.secret_hash, hash_secret(secret))

    def is_active(self, now: datetime | None = None) -> bool:
        now = now or timezone.now()
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or self.expires_at > now

    def has_scope(self, scope: str) -> bool:
        return scope_covers(self.scopes, scope)

    def touch_due(self, now: datetime) -> bool:
        """Is this use to be recorded (none recorded within the interval)?"""
        interval = timedelta(seconds=settings.MCPTASKS_TOKEN_LAST_USED_INTERVAL_S)
        return self.last_used_at is None or now - self.last_used_at >= interval

    def touch(self, now: datetime | None = None) -> None:
        """Record use at most once per interval: one conditional UPDATE, never on every request."""
        now = now or timezone.now()
        if not self.touch_due(now):
            return
        interval = timedelta(seconds=settings.MCPTASKS_TOKEN_LAST_USED_INTERVAL_S)
        with db_retry.repeatable():  # a request repeated after a lost connection may touch again
            ApiToken.objects.filter(pk=self.pk).filter(
                models.Q(last_used_at__isnull=True) | models.Q(last_used_at__lt=now - interval)
            ).update(last_used_at=now)
        self.last_used_at = now
