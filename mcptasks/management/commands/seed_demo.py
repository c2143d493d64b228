"""Seed the demo: tenants acme and globex, the cast, a token each, a few tasks."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from mcptasks.models import ApiToken, Membership, ReviewerGroup, Role, Task, Tenant

# (username, staff, [(tenant, role)], password) — the fixed cast of STYLE rule 16.
CAST: list[tuple[str, bool, list[tuple[str, str]]]] = [
    ("alice", False, [("acme", Role.MEMBER)]),
    ("adam", False, [("acme", Role.MEMBER)]),
    ("amy", False, [("acme", Role.ADMIN)]),
    ("bob", False, [("globex", Role.MEMBER)]),
    ("olga", True, [("acme", Role.OPERATOR), ("globex", Role.OPERATOR)]),
    ("carl", False, [("acme", Role.AUDITOR), ("globex", Role.AUDITOR)]),
]
TENANTS = {"acme": "Acme Corp", "globex": "Globex Inc"}
DEMO_PASSWORD_SUFFIX = "-demo-pass"


def seed_cast(*, with_tokens: bool = True) -> dict[str, dict[str, Any]]:
    """Create tenants, users, memberships and (optionally) one token each; return the cast."""
    User = get_user_model()
    tenants = {
        slug: Tenant.objects.get_or_create(slug=slug, defaults={"name": name})[0]
        for slug, name in TENANTS.items()
    }
    cast: dict[str, dict[str, Any]] = {}
    for username, staff, roles in CAST:
        user, created = User.objects.get_or_create(
            username=username, defaults={"is_staff": staff, "email": f"{username}@example.com"}
        )
        password = f"{username}{DEMO_PASSWORD_SUFFIX}"
        if created:
            user.set_password(password)
            user.save(update_fields=["password"])
        for slug, role in roles:
            Membership.objects.get_or_create(user=user, tenant=tenants[slug], role=role)
        entry: dict[str, Any] = {"user": user, "password": password, "tenant": tenants[roles[0][0]]}
        if with_tokens:
            _, plaintext = ApiToken.issue(
                user=user, tenant=tenants[roles[0][0]], name=f"{username} demo token"
            )
            entry["token"] = plaintext
        cast[username] = entry
    return cast


# The demo's two-approval production deploy (issue 21): acme's release managers, two of whom
# must approve deploy_service to production.
# (Both can see the tenant's tasks: a reviewer must, see docs/tools.md "Approval gates".)
RELEASE_MANAGERS = ("olga", "amy")


def seed_release_managers(cast: dict[str, dict[str, Any]]) -> None:
    from audit.record import Actor
    from mcptasks import approval_policies

    acme = Tenant.objects.get(slug="acme")
    group, _ = ReviewerGroup.objects.get_or_create(tenant=acme, name="release-managers")
    group.members.add(*(cast[name]["user"] for name in RELEASE_MANAGERS))
    approval_policies.save_rule(
        tenant=acme,
        actor=Actor.for_user(cast["amy"]["user"]),
        created_by=cast["amy"]["user"],
        tool_name="deploy_service",
        argument="environment",
        value="production",
        required=2,
        groups=["release-managers"],
    )


class Command(BaseCommand):
    help = "Seed demo tenants, users, tokens and tasks (prints the tokens once)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--if-empty", action="store_true", help="do nothing if any tenant exists"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["if_empty"] and Tenant.objects.exists():
            self.stdout.write("Demo data already present; not seeding again.")
            return
        with transaction.atomic():
            cast = seed_cast()
            seed_release_managers(cast)
        from mcptasks.demo_tasks import seed_demo_tasks

        seed_demo_tasks(cast)
        self.stdout.write(self.style.SUCCESS("Demo seeded. Logins and MCP tokens (shown once):"))
        for username, entry in cast.items():
            self.stdout.write(
                f"  {username:6} password {entry['password']:22} token {entry['token']}"
            )
        self.stdout.write(f"Tasks: {Task.objects.count()}")
