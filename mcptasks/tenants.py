"""Creating tenants and memberships, audited in the same transaction (STYLE rule 7).

The administration commands (``manage.py create_tenant``, ``add_member``) call these; authorizing
them is the caller's job (a shell on the server is the operator's own authority).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from audit.record import Actor, record
from mcptasks.models import Membership, Role, Tenant


class TenancyError(ValueError):
    """A request the data refuses: a taken slug, an unknown role; the message says which."""


def create_tenant(*, slug: str, name: str, actor: Actor) -> Tenant:
    """Create a tenant and record ``tenant.created`` on its chain.

    Raises :class:`TenancyError` for an invalid or taken slug or an invalid name.
    """
    tenant = Tenant(slug=slug, name=name or slug)
    try:
        tenant.full_clean()
    except ValidationError as exc:
        raise TenancyError(_first_message(exc)) from None
    try:
        with transaction.atomic():
            tenant.save(force_insert=True)
            record(
                action="tenant.created",
                actor=actor,
                tenant_id=tenant.pk,
                tenant_slug=tenant.slug,
                data={"slug": tenant.slug, "name": tenant.name},
            )
    except IntegrityError:  # created concurrently since full_clean looked
        raise TenancyError(f"a tenant {slug!r} already exists") from None
    return tenant


def add_membership(*, user: Any, tenant: Tenant, role: str, actor: Actor) -> bool:
    """Give ``user`` ``role`` in ``tenant`` and record ``membership.added``.

    Returns False (and records nothing) when the user already holds that role there. Raises
    :class:`TenancyError` for an unknown role.
    """
    if role not in Role.values:
        raise TenancyError(f"unknown role {role!r} (one of {', '.join(Role.values)})")
    with transaction.atomic():
        _, created = Membership.objects.get_or_create(user=user, tenant=tenant, role=role)
        if created:
            record(
                action="membership.added",
                actor=actor,
                tenant_id=tenant.pk,
                tenant_slug=tenant.slug,
                data={"user": user.get_username(), "user_id": user.pk, "role": role},
            )
    return created


def _first_message(exc: ValidationError) -> str:
    if hasattr(exc, "error_dict"):
        field, errors = next(iter(exc.error_dict.items()))
        return f"{field}: {errors[0].messages[0]}"
    return str(exc.messages[0])
