"""``manage.py add_member USERNAME --tenant SLUG --role ROLE [--create]``: a role in a tenant."""

from __future__ import annotations

import sys
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from mcptasks.management.lookup import command_actor, tenant_named, user_named
from mcptasks.models import Role
from mcptasks.tenants import TenancyError, add_membership


class Command(BaseCommand):
    help = (
        "Give a user a role (member, admin, operator, auditor) in a tenant; --create makes the "
        "user first. Audited as membership.added."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("username")
        parser.add_argument("--tenant", required=True, help="a tenant slug")
        parser.add_argument("--role", required=True, choices=Role.values)
        parser.add_argument("--create", action="store_true", help="create the user if missing")
        parser.add_argument("--email", default="", help="with --create: the user's e-mail")
        parser.add_argument(
            "--password-stdin",
            action="store_true",
            help="with --create: read the dashboard password from stdin (else the user has "
            "none until `manage.py changepassword`; tokens work without one)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = tenant_named(options["tenant"])
        username = options["username"]
        User = get_user_model()
        password = sys.stdin.readline().rstrip("\n") if options["password_stdin"] else None
        with transaction.atomic():
            created_user = False
            if options["create"] and not User.objects.filter(username=username).exists():
                user = User(username=username, email=options["email"])
                try:
                    user.full_clean(exclude=["password"])
                    if password is not None:
                        validate_password(password, user)
                except ValidationError as exc:
                    raise CommandError("; ".join(exc.messages)) from None
                if password is None:
                    user.set_unusable_password()
                else:
                    user.set_password(password)
                user.save()
                created_user = True
            elif options["password_stdin"] or options["email"]:
                raise CommandError(
                    "--email and --password-stdin only go with --create of a new user"
                )
            else:
                user = user_named(username)
            try:
                added = add_membership(
                    user=user,
                    tenant=tenant,
                    role=options["role"],
                    actor=command_actor("add_member"),
                )
            except TenancyError as exc:
                raise CommandError(str(exc)) from None
        if created_user:
            self.stdout.write(f"user {username} created")
        what = "added" if added else "already held"
        self.stdout.write(
            self.style.SUCCESS(f"{username}: role {options['role']} in {tenant.slug} {what}")
        )
