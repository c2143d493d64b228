"""What the administration commands share: finding the named tenant and user, or saying which
one does not exist (a ``CommandError``: exit status 1 and the message on stderr)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from audit.record import Actor
from mcptasks.models import Tenant


def tenant_named(slug: str) -> Tenant:
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        known = ", ".join(Tenant.objects.order_by("slug").values_list("slug", flat=True)[:20])
        raise CommandError(f"no tenant {slug!r} (tenants: {known or 'none yet'})")
    return tenant


def user_named(username: str) -> Any:
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise CommandError(f"no user {username!r} (create one with add_member --create)")
    return user


def command_actor(name: str) -> Actor:
    """The audit actor of a command run on the server: the operator's shell, not a user."""
    return Actor.system(f"manage.py {name}")
