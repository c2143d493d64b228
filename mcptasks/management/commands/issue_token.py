"""``manage.py issue_token USERNAME --tenant SLUG [--scope S ...]``: an API token, shown once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from mcptasks import tokens
from mcptasks.api.serializers import ISSUABLE_SCOPES
from mcptasks.management.lookup import command_actor, tenant_named, user_named
from mcptasks.models import Membership


class Command(BaseCommand):
    help = (
        "Issue an API token to a member of a tenant and print its secret once (`mcp` for the "
        "MCP endpoint, `api` for the REST API). Audited as token.issued."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("username", help="the token's owner")
        parser.add_argument("--tenant", required=True, help="a tenant the owner belongs to")
        parser.add_argument(
            "--scope",
            action="append",
            choices=ISSUABLE_SCOPES,
            help="repeatable; default: mcp",
        )
        parser.add_argument("--name", default="", help="what the token is for")
        parser.add_argument("--expires-in-days", type=int, help="default: never expires")
        parser.add_argument(
            "--quiet", action="store_true", help="print only the secret (for TOKEN=$(...))"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = tenant_named(options["tenant"])
        user = user_named(options["username"])
        if not user.is_active:
            raise CommandError(f"user {user.get_username()!r} is inactive")
        if not Membership.objects.filter(user=user, tenant=tenant).exists():
            raise CommandError(
                f"{user.get_username()!r} is not a member of {tenant.slug!r} "
                f"(add_member {user.get_username()} --tenant {tenant.slug} --role member)"
            )
        days = options["expires_in_days"]
        if days is not None and days < 1:
            raise CommandError("--expires-in-days must be at least 1")
        if len(options["name"]) > 100:
            raise CommandError("--name is at most 100 characters")
        scopes = sorted(set(options["scope"] or ["mcp"]))
        token, secret = tokens.issue_token(
            user=user,
            tenant=tenant,
            actor=command_actor("issue_token"),
            name=options["name"] or "issued with manage.py issue_token",
            scopes=scopes,
            expires_at=timezone.now() + timedelta(days=days) if days else None,
        )
        if options["quiet"]:
            self.stdout.write(secret)
            return
        expires = token.expires_at.isoformat() if token.expires_at else "never"
        self.stdout.write(
            f"token {token.lookup} for {user.get_username()} in {tenant.slug}, "
            f"scopes {' '.join(scopes)}, expires {expires}. The secret (shown once):"
        )
        self.stdout.write(secret)
