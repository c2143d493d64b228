"""What a user holds: roles per tenant, read once per user object, and the rights they carry.

The one role cache of the access package lives here (``_mcptasks_roles`` on the user object,
and ``_mcptasks_staff_operator``): every question in access reads roles through :func:`roles`,
and :func:`refresh` forgets them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from mcptasks.models import Membership, Role, Task, TaskUserObjectPermission


class Action(StrEnum):
    VIEW = "view"
    ANSWER = "answer"
    CANCEL = "cancel"
    FORCE_CANCEL = "force_cancel"
    RECONCILE = "reconcile"
    GRANT = "grant"
    RETRY = "retry"  # an operator's: re-run a failed task from its failed step (failures.py)


# Delegations an operator may grant on one task (guardian codenames).
DELEGATIONS = {"view": "view_task", "answer": "answer_task"}

# Which roles carry which task actions over every task of their tenant.
ROLE_ACTIONS: dict[str, frozenset[Action]] = {
    Role.MEMBER: frozenset(),
    Role.AUDITOR: frozenset({Action.VIEW}),
    Role.ADMIN: frozenset({Action.VIEW, Action.CANCEL}),
    Role.OPERATOR: frozenset(set(Action)),
}
OWNER_ACTIONS = frozenset({Action.VIEW, Action.ANSWER, Action.CANCEL})


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.allowed


ALLOW = Decision(True)
NOT_A_MEMBER = Decision(False, "not a member of the task's tenant")
AUDIT_ROLES = frozenset({Role.AUDITOR, Role.OPERATOR, Role.ADMIN})
TOKEN_ADMIN_ROLES = frozenset({Role.ADMIN, Role.OPERATOR})
ROLES_CACHE = "_mcptasks_roles"
STAFF_OPERATOR_CACHE = "_mcptasks_staff_operator"


def _authenticated(user: Any) -> bool:
    return user is not None and user.is_authenticated and user.is_active


def roles_by_tenant(user: Any) -> dict[int, set[str]]:
    """The roles ``user`` (a user or a user id) holds now, by tenant, read afresh — for a
    long-lived socket or stream re-checking its viewer; every other question asks :func:`roles`."""
    roles: dict[int, set[str]] = {}
    for tenant_id, role in Membership.objects.filter(user=user).values_list("tenant_id", "role"):
        roles.setdefault(tenant_id, set()).add(role)
    return roles


def cached_roles(user: Any) -> dict[int, set[str]] | None:
    """The roles already read for this user object, or None when none were read yet (no query)."""
    return getattr(user, ROLES_CACHE, None)


def roles(user: Any) -> dict[int, set[str]]:
    """The roles of ``user`` by tenant, read once per user object (one request, one socket
    check); none, and no query, for an anonymous or inactive user."""
    if not _authenticated(user):
        return {}
    cache = cached_roles(user)
    if cache is None:
        cache = roles_by_tenant(user)
        setattr(user, ROLES_CACHE, cache)
    return cache


def tenant_roles(user: Any, tenant_id: int) -> set[str]:
    return roles(user).get(tenant_id, set())


def member_tenant_ids(user: Any) -> list[int]:
    """The tenants ``user`` (active) is a member of now (any role), in id order."""
    return sorted(roles(user)) if _authenticated(user) else []


def holds_membership(user: Any, tenant_id: int) -> bool:
    """Is ``user`` (active) a member of ``tenant_id`` now? Asked at every authentication of a
    token or JWT: a token acts only while its owner belongs to the token's tenant."""
    return _authenticated(user) and tenant_id in roles(user)


def refresh(user: Any) -> None:
    """Forget what was read of ``user``'s roles: the next question reads them again (long-lived
    streams and sockets re-check their viewer this way)."""
    for name in (ROLES_CACHE, STAFF_OPERATOR_CACHE):
        if hasattr(user, name):
            delattr(user, name)


def staff_operator(user: Any) -> bool:
    """Staff users holding an operator role somewhere read every audit chain (the ``system``
    chain included). They act — on tasks, tokens, tenants — only where they hold a role.
    Asked once per user object, like the roles."""
    cached = getattr(user, STAFF_OPERATOR_CACHE, None)
    if cached is None:
        cached = bool(user.is_staff) and any(Role.OPERATOR in r for r in roles(user).values())
        setattr(user, STAFF_OPERATOR_CACHE, cached)
    return bool(cached)


def has_delegation(user: Any, task: Task, codename: str) -> bool:
    return TaskUserObjectPermission.objects.filter(
        user=user, content_object=task, permission__codename=codename
    ).exists()


def role_allows(user: Any, task: Task, action: Action) -> bool:
    return any(action in ROLE_ACTIONS[role] for role in tenant_roles(user, task.tenant_id))


def tenants_where(user: Any, action: Action) -> list[int] | None:
    """Tenant ids where a role of ``user`` carries ``action`` over every task (a staff operator
    too acts only where they hold a role; None, every tenant, is no longer answered). Owner rights and delegations are not included."""
    if not _authenticated(user):
        return []
    return sorted(
        tenant_id
        for tenant_id, held in roles(user).items()
        if any(action in ROLE_ACTIONS[role] for role in held)
    )


def operations_tenants(user: Any) -> list[int]:
    """Tenants whose figures the operations page shows ``user``: where a role of theirs may
    force-cancel every task (operators; not members, tenant admins or auditors). Empty: no
    operations page, and no link to it."""
    return tenants_where(user, Action.FORCE_CANCEL) or []


def requesters(task: Task) -> set[int]:
    """The people behind ``task``: its principal, and whoever issued the token that created
    it — a token issued for someone else does not make its issuer a bystander (no
    self-approval by proxy)."""
    issuer = task.token_issuer_id()
    return {task.principal_id} if issuer is None else {task.principal_id, issuer}
