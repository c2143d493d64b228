"""Every authorization question, answered in one place (DESIGN §8, STYLE rule 5).

Owner rights come from ``Task.principal``, role rights from Membership, and per-task delegations
from django-guardian — this is the only module that calls guardian. A task id is a handle, never
an authority.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Exists, Q, QuerySet
from guardian.shortcuts import assign_perm, remove_perm

from mcptasks.models import (
    Audience,
    InputRequest,
    Membership,
    Role,
    Task,
    TaskUserObjectPermission,
)

User = get_user_model()


class Action(StrEnum):
    VIEW = "view"
    ANSWER = "answer"
    CANCEL = "cancel"
    FORCE_CANCEL = "force_cancel"
    RECONCILE = "reconcile"
    GRANT = "grant"


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


def roles_by_tenant(user: Any) -> dict[int, set[str]]:
    roles: dict[int, set[str]] = {}
    for tenant_id, role in Membership.objects.filter(user=user).values_list("tenant_id", "role"):
        roles.setdefault(tenant_id, set()).add(role)
    return roles


def _tenant_roles(user: Any, tenant_id: int) -> set[str]:
    cache = getattr(user, "_mcptasks_roles", None)
    if cache is None:
        cache = roles_by_tenant(user)
        user._mcptasks_roles = cache
    return cache.get(tenant_id, set())


def is_cross_tenant_operator(user: Any) -> bool:
    """Staff users holding an operator role somewhere act as operators in every tenant."""
    return _is_staff_operator(user)


def _is_staff_operator(user: Any) -> bool:
    """Staff users holding an operator role somewhere act as operators in every tenant."""
    return bool(user.is_staff) and Membership.objects.filter(user=user,
                                                             role=Role.OPERATOR).exists()


def _delegated(user: Any, task: Task, codename: str) -> bool:
    return TaskUserObjectPermission.objects.filter(
        user=user, content_object=task, permission__codename=codename).exists()


def _role_allows(user: Any, task: Task, action: Action) -> bool:
    roles = _tenant_roles(user, task.tenant_id)
    if any(action in ROLE_ACTIONS[role] for role in roles):
        return True
    return action in ROLE_ACTIONS[Role.OPERATOR] and _is_staff_operator(user)


def can(user: Any, action: Action, task: Task) -> Decision:
    """May ``user`` do ``action`` to ``task``? Checks principal, tenant roles and grants."""
    if user is None or not user.is_authenticated or not user.is_active:
        return Decision(False, "not authenticated")
    if task.principal_id == user.pk and action in OWNER_ACTIONS:
        return ALLOW
    if _role_allows(user, task, action):
        return ALLOW
    if action in (Action.VIEW, Action.ANSWER):
        if _delegated(user, task, DELEGATIONS[action.value]):
            return ALLOW
        if action == Action.VIEW and _delegated(user, task, DELEGATIONS["answer"]):
            return ALLOW
    return Decision(False, f"not permitted to {action.value} this task")


def visible_tasks(user: Any) -> QuerySet[Task]:
    """Every task ``user`` may see, as one query (no per-row checks)."""
    if user is None or not user.is_authenticated or not user.is_active:
        return Task.objects.none()
    seeing_roles = [r for r, actions in ROLE_ACTIONS.items() if Action.VIEW in actions]
    tenant_ids = Membership.objects.filter(user=user, role__in=seeing_roles).values("tenant_id")
    delegated = TaskUserObjectPermission.objects.filter(
        user=user, permission__codename__in=list(DELEGATIONS.values())
    ).values("content_object_id")
    visible = Q(principal=user) | Q(tenant_id__in=tenant_ids) | Q(pk__in=delegated)
    if user.is_staff:
        # A staff operator sees every task: asked inside the listing query, not as a query first.
        visible |= Q(Exists(Membership.objects.filter(user=user, role=Role.OPERATOR)))
    return Task.objects.filter(visible)


def get_visible_task(user: Any, task_id: Any) -> Task | None:
    """The task if ``user`` may see it, else None — unknown and forbidden look the same."""
    if not isinstance(task_id, str) or not task_id or len(task_id) > 64:
        return None
    task = Task.objects.select_related("tenant").filter(pk=task_id).first()
    if task is None or not can(user, Action.VIEW, task):
        return None
    return task


def may_answer(user: Any, request: InputRequest, task: Task) -> Decision:
    """May ``user`` answer this input request? Audience, delegation and separation of duties.

    Enforced for every channel (MCP ``tasks/update``, dashboard, REST API).
    """
    if user is None or not user.is_authenticated or not user.is_active:
        return Decision(False, "not authenticated")
    if request.forbid_self_approval and user.pk == task.principal_id:
        return Decision(False, "the requester may not approve their own request")
    is_owner = user.pk == task.principal_id
    is_operator = _role_allows(user, task, Action.ANSWER)
    delegated = _delegated(user, task, DELEGATIONS["answer"])
    if request.audience == Audience.CLIENT:
        return ALLOW if is_owner else Decision(False, "only the requesting client may answer")
    if request.audience == Audience.OPERATOR:
        if is_operator or delegated:
            return ALLOW
        return Decision(False, "only an operator or a named approver may answer")
    if is_owner or is_operator or delegated:
        return ALLOW
    return Decision(False, "not permitted to answer this request")


def answerable_requests(user: Any, task: Task, *, channel: str) -> list[InputRequest]:
    """Pending requests of ``task`` that ``user`` may answer on ``channel``.

    On ``mcp`` (the client) only ``client`` and ``any`` audiences are listed, as the wire
    ``inputRequests`` of a task.
    """
    pending = list(task.input_requests.filter(state="pending").order_by("created_at", "id"))
    if channel == "mcp":
        pending = [r for r in pending if r.audience in (Audience.CLIENT, Audience.ANY)]
    return [r for r in pending if may_answer(user, r, task)]


def assign_delegation(*, grantee: Any, task: Task, delegation: str) -> None:
    """Store a per-task right (``view`` or ``answer``); the caller authorized and audits it."""
    assign_perm(f"mcptasks.{DELEGATIONS[delegation]}", grantee, task)


def remove_delegation(*, grantee: Any, task: Task, delegation: str) -> None:
    remove_perm(f"mcptasks.{DELEGATIONS[delegation]}", grantee, task)


def delegations_of(task: Task) -> list[tuple[Any, str]]:
    """``(user, delegation)`` pairs granted on ``task``."""
    by_codename = {codename: name for name, codename in DELEGATIONS.items()}
    return [(row.user, by_codename[row.permission.codename])
            for row in TaskUserObjectPermission.objects.filter(content_object=task)
            .select_related("user", "permission")
            if row.permission.codename in by_codename]
