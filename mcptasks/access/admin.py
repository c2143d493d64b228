"""Administration rights: the audit trail, API tokens, event destinations, approval policies
and whether a tenant may be named at all."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from mcptasks.access.roles import (
    ALLOW,
    AUDIT_ROLES,
    ROLE_ACTIONS,
    TOKEN_ADMIN_ROLES,
    Decision,
    _authenticated,
    roles,
    roles_by_tenant,
    staff_operator,
    tenant_roles,
)
from mcptasks.models import Membership, Role


def may_manage_approvals(user: Any, tenant_id: int) -> Decision:
    """Reviewer groups and approval policies of a tenant are managed by its admins."""
    if not _authenticated(user):
        return Decision(False, "not authenticated")
    if Role.ADMIN in tenant_roles(user, tenant_id):
        return ALLOW
    return Decision(False, "only the tenant's admins manage reviewer groups and approval policies")


def may_manage_destinations(user: Any, tenant_id: int) -> Decision:
    """A tenant's event destinations (webhooks, SIEM streams) are created, changed and deleted
    by its admins."""
    if not _authenticated(user):
        return Decision(False, "not authenticated")
    if Role.ADMIN in tenant_roles(user, tenant_id):
        return ALLOW
    return Decision(False, "only the tenant's admins manage its event destinations")


def may_see_deliveries(user: Any, tenant_id: int) -> Decision:
    """Destinations and their delivery logs are read by the tenant's admins and operators, who
    may also redeliver a dead-lettered delivery (never its secret: nobody reads that)."""
    if not _authenticated(user):
        return Decision(False, "not authenticated")
    if tenant_roles(user, tenant_id) & {Role.ADMIN, Role.OPERATOR}:
        return ALLOW
    return Decision(False, "only the tenant's admins and operators see its event destinations")


def destination_tenants(user: Any) -> list[int]:
    """Tenants whose destinations ``user`` may see (:func:`may_see_deliveries`)."""
    if not _authenticated(user):
        return []
    return sorted(t for t, roles in roles(user).items() if roles & {Role.ADMIN, Role.OPERATOR})


def audit_tenants(user: Any) -> list[int] | None:
    """Tenants whose audit trail ``user`` may read (auditors, operators, tenant admins); None
    means every chain, the ``system`` chain included (staff operators)."""
    if not _authenticated(user):
        return []
    if staff_operator(user):
        return None
    return sorted(tenant_id for tenant_id, roles in roles(user).items() if roles & AUDIT_ROLES)


def visible_audit_events(user: Any) -> QuerySet[Any]:
    """The audit events ``user`` may read, as one queryset."""
    from audit.models import AuditEvent

    tenants = audit_tenants(user)
    if tenants is None:
        return AuditEvent.objects.all()
    return AuditEvent.objects.filter(tenant_id__in=tenants)


def may_read_audit(user: Any, tenant_id: int | None) -> bool:
    """May ``user`` read (and export, and verify) the chain of ``tenant_id`` (None: system)?"""
    tenants = audit_tenants(user)
    return tenants is None or (tenant_id is not None and tenant_id in tenants)


def token_admin_tenants(user: Any) -> list[int] | None:
    """Tenants whose API tokens ``user`` administers (issue, list, revoke): tenant admins and
    operators — a staff operator too, only where they hold the role (None is not answered)."""
    if not _authenticated(user):
        return []
    return sorted(
        tenant_id for tenant_id, roles in roles(user).items() if roles & TOKEN_ADMIN_ROLES
    )


def visible_tokens(user: Any) -> QuerySet[Any]:
    """The user's own tokens and those of the tenants they administer."""
    from mcptasks.models import ApiToken

    if not _authenticated(user):
        return ApiToken.objects.none()
    tenants = token_admin_tenants(user)
    if tenants is None:
        return ApiToken.objects.all()
    return ApiToken.objects.filter(Q(user=user) | Q(tenant_id__in=tenants))


def _rights(roles: set[str]) -> set[str]:
    """What a set of roles lets its holder do in a tenant (an operator's cover an auditor's)."""
    rights: set[str] = {action.value for role in roles for action in ROLE_ACTIONS[role]}
    if roles & AUDIT_ROLES:
        rights.add("read_audit")
    if roles & TOKEN_ADMIN_ROLES:
        rights.add("administer_tokens")
    return rights


def may_issue_token(user: Any, *, tenant_id: int, owner: Any) -> Decision:
    """Tokens are issued by a tenant's admins and operators, to a member of that tenant."""
    tenants = token_admin_tenants(user)
    if tenants is not None and tenant_id not in tenants:
        return Decision(False, "only the tenant's admins and operators issue tokens")
    if not Membership.objects.filter(user=owner, tenant_id=tenant_id).exists():
        return Decision(False, "a token belongs to a member of its tenant")
    if owner.pk != user.pk:
        # A token carries every right of its owner: issuing one for someone else must not give
        # the issuer rights they do not hold themselves.
        if owner.is_staff or owner.is_superuser:
            return Decision(False, "tokens of staff users are issued by those users themselves")
        issuer_roles = roles_by_tenant(user)
        for owner_tenant, roles in roles_by_tenant(owner).items():
            if tenants is not None and owner_tenant not in tenants:
                return Decision(
                    False, "the owner belongs to a tenant the issuer does not administer"
                )
            held = issuer_roles.get(owner_tenant, set()) | {Role.MEMBER}
            if tenants is not None and not _rights(roles) <= _rights(held):
                return Decision(False, "the token would carry roles the issuer does not hold")
    return ALLOW


def may_revoke_token(user: Any, token: Any) -> Decision:
    """The owner revokes their token; the tenant's admins and operators revoke any of its."""
    if not _authenticated(user):
        return Decision(False, "not authenticated")
    tenants = token_admin_tenants(user)
    if token.user_id == user.pk or tenants is None or token.tenant_id in tenants:
        return ALLOW
    return Decision(False, "not permitted to revoke this token")


def may_see_tenant(user: Any, tenant_id: int) -> bool:
    """May ``user`` know that the tenant exists (a member)? A request that names a tenant the
    user may not see answers as if it did not exist (404, never 403)."""
    return _authenticated(user) and tenant_id in roles(user)
