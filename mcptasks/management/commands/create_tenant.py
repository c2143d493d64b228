"""``manage.py create_tenant SLUG [--name NAME]``: a new tenant (audited)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from mcptasks.management.lookup import command_actor
from mcptasks.tenants import TenancyError, create_tenant


class Command(BaseCommand):
    help = "Create a tenant (slug: letters, digits, - and _). Audited as tenant.created."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("slug", help="e.g. acme")
        parser.add_argument("--name", default="", help="display name (default: the slug)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            tenant = create_tenant(
                slug=options["slug"], name=options["name"], actor=command_actor("create_tenant")
            )
        except TenancyError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(self.style.SUCCESS(f"tenant {tenant.slug} ({tenant.name}) created"))
