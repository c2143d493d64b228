"""Tasks: who may do what to one task (:func:`can`), the doorway that fetches and decides in one
call (:func:`task_for`), the set form of ``can`` for listings (:func:`visible_tasks`),
per-task delegations (django-guardian: the access package is the only code that calls it) and
the audit actor of a user's action (:func:`actor`).

Owner rights come from ``Task.principal``, role rights from Membership, and per-task delegations
from guardian. A task id is a handle, never an authority.
"""

from __future__ import annotations

from typing import Any, NoReturn

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet
from guardian.shortcuts import assign_perm, remove_perm

from audit.record import Actor
from mcptasks import limits
from mcptasks.access.roles import (
    ALLOW,
    DELEGATIONS,
    NOT_A_MEMBER,
    OWNER_ACTIONS,
    ROLE_ACTIONS,
    Action,
    Decision,
    _authenticated,
    cached_roles,
    has_delegation,
    holds_membership,
    role_allows,
    tenant_roles,
    tenants_where,
)
from mcptasks.models import Membership, Role, Task, TaskUserObjectPermission
from mcptasks.plans import written

User = get_user_model()
CHANNELS = ("mcp", "rest", "dashboard")


def decide_without_queries(
    user: Any, action: Action, task: Task, *, member: bool | None = None
) -> Decision | None:
    """The decision when the user and the task alone settle it (an inactive user; the task's
    own principal, while a member of its tenant); None when roles and grants must be looked up.
    Runs no query: ``member`` says whether the user is a member of the task's tenant (read by
    the caller with the task), else the roles already read for this user object answer it."""
    if user is None or not user.is_authenticated or not user.is_active:
        return Decision(False, "not authenticated")
    if member is None:
        cache = cached_roles(user)
        member = None if cache is None else task.tenant_id in cache
    if member is False:
        return NOT_A_MEMBER
    if member and task.principal_id == user.pk and action in OWNER_ACTIONS:
        return ALLOW
    return None


def can(user: Any, action: Action, task: Task) -> Decision:
    """May ``user`` do ``action`` to ``task``? Every right — the owner's, a role's, a
    delegation — holds only while the user is a member of the task's tenant."""
    decided = decide_without_queries(user, action, task)
    if decided is not None:
        return decided
    if not holds_membership(user, task.tenant_id):
        return NOT_A_MEMBER
    if task.principal_id == user.pk and action in OWNER_ACTIONS:
        return ALLOW
    if role_allows(user, task, action):
        return ALLOW
    if action in (Action.VIEW, Action.ANSWER):
        if has_delegation(user, task, DELEGATIONS[action.value]):
            return ALLOW
        if action == Action.VIEW and has_delegation(user, task, DELEGATIONS["answer"]):
            return ALLOW
    return Decision(False, f"not permitted to {action.value} this task")


def _delegations_carrying(action: Action) -> list[str]:
    """The guardian codenames that let their holder do ``action`` (an answer grant shows too)."""
    if action == Action.VIEW:
        return list(DELEGATIONS.values())
    return [DELEGATIONS["answer"]] if action == Action.ANSWER else []


def visible_tasks(
    user: Any, tenant_id: int | None = None, *, action: Action = Action.VIEW
) -> QuerySet[Task]:
    """The one listing scope: every task ``user`` may see (or, with ``action``, may do it to) —
    the set form of :func:`can`, as one queryset with no per-row check, optionally within one
    tenant. Owner rights, tenant roles and delegations, each only while a member of the task's
    tenant.

    Two shapes, the same rows: before anything was read of the user it is one statement (the
    roles and grants as subqueries); once their roles are read (:func:`roles`, as every
    dashboard page does) it is written so the planner walks the ``(tenant, created)`` or
    ``(principal, created)`` index in order — a tenant seen whole is a plain tenant filter, and
    delegated task ids are read first (they are few)."""
    return _scope(user, tenant_id, action, cached_roles(user))


def _scope(
    user: Any, tenant_id: int | None, action: Action, held: dict[int, set[str]] | None
) -> QuerySet[Task]:
    """:func:`visible_tasks` in one statement (``held`` None) or planned on the roles ``held``."""
    if not _authenticated(user):
        return Task.objects.none()
    tasks = Task.objects.all() if tenant_id is None else Task.objects.filter(tenant_id=tenant_id)
    codenames = _delegations_carrying(action)
    if held is None:
        whole_roles = [role for role, actions in ROLE_ACTIONS.items() if action in actions]
        whole: Any = Membership.objects.filter(user=user, role__in=whole_roles).values("tenant_id")
        members: Any = Membership.objects.filter(user=user).values("tenant_id")
        grants: Any = TaskUserObjectPermission.objects.filter(
            user=user, permission__codename__in=codenames
        ).values("content_object_id")
        visible = Q(tenant_id__in=whole)
        if action in OWNER_ACTIONS:
            visible |= Q(principal=user)
        if codenames:
            visible |= Q(pk__in=grants)
        return tasks.filter(Q(tenant_id__in=members) & visible)
    whole = tenants_where(user, action) or []
    if tenant_id is not None and tenant_id in whole:
        return tasks
    members = sorted(held)
    if tenant_id is not None and tenant_id not in members:
        return Task.objects.none()
    grants = (
        list(
            TaskUserObjectPermission.objects.filter(user=user, permission__codename__in=codenames)
            .values_list("content_object_id", flat=True)
            .distinct()
        )
        if codenames
        else []
    )
    visible = Q(principal=user) if action in OWNER_ACTIONS else Q(pk__in=[])
    if grants:
        visible |= Q(pk__in=grants)
    if tenant_id is None and whole:
        if action not in OWNER_ACTIONS and not grants:
            return tasks.filter(tenant_id__in=whole)  # whole tenants only: a plain filter
        visible |= Q(tenant_id__in=whole)
    return tasks.filter(visible, tenant_id__in=members)


def get_visible_task(user: Any, task_id: Any, related: tuple[str, ...] = ()) -> Task | None:
    """The task if ``user`` may see it, else None — unknown and forbidden look the same, and
    cost the same: visibility is decided in the query that fetches (:func:`visible_tasks`
    narrowed to the id), so "not yours" and "not there" are one statement that finds no row.
    ``related``: relations to load with it (besides the tenant)."""
    if not isinstance(task_id, str) or not task_id or len(task_id) > 64:
        return None
    scope = _scope(user, None, Action.VIEW, None)  # one statement, whatever was read already
    return scope.select_related("tenant", *related).filter(pk=task_id).first()


class TaskHidden(LookupError):
    """No task this actor may see has this id (unknown, foreign, expired): every channel says
    "not found" (MCP -32602, REST 404, dashboard 404)."""


class Refused(PermissionError):
    """The actor may see the task but not do this to it (MCP -32602, REST 403, dashboard 403)."""

    def __init__(self, task: Task, decision: Decision) -> None:
        super().__init__(decision.reason)
        self.task = task
        self.decision = decision


def _missed(user: Any, task_id: Any) -> NoReturn:
    """A lookup that found nothing the user may see: counted against their budget of unknown
    ids (past it ``limits.Throttled``), then :class:`TaskHidden`."""
    if user is not None and user.is_authenticated:
        limits.check_unknown_lookup(principal_id=user.pk, task_id=str(task_id)[:64])
    raise TaskHidden(str(task_id)[:64])


def _decide(user: Any, action: Action, task: Task) -> None:
    if action != Action.VIEW:
        decision = can(user, action, task)
        if not decision:
            raise Refused(task, decision)


def task_for(
    user: Any,
    task_id: Any,
    action: Action = Action.VIEW,
    *,
    related: tuple[str, ...] = (),
    lookup: bool = True,
) -> Task:
    """The doorway: the task ``user`` may do ``action`` to, fetched and decided in one call, on
    every channel (MCP, REST, dashboard, its socket, the outbox). Raises :class:`TaskHidden`
    when the user may not see it (the miss counts against their budget of unknown-id lookups,
    past which ``limits.Throttled`` is raised) and :class:`Refused` when they may see it but
    not do ``action``. ``lookup=False`` where the id did not come from the user (a tenant's
    change forwarded to their socket, a destination's owner the outbox writes for): a miss
    there is no probing and counts against nothing."""
    task = get_visible_task(user, task_id, related)
    if task is None:
        if not lookup:
            raise TaskHidden(str(task_id)[:64])
        _missed(user, task_id)
    _decide(user, action, task)
    return task


def effect_for(user: Any, effect_id: Any, action: Action = Action.VIEW) -> Any:
    """The doorway for an effect: the effect ``effect_id`` (its task loaded) when ``user`` may
    do ``action`` to its task — :class:`TaskHidden` for an unknown id or an effect of a task
    they may not see (an effect id is no task id: a miss counts against no lookup budget),
    :class:`Refused` when they may see it but not do ``action``."""
    from mcptasks.models import Effect

    effect = (
        Effect.objects.select_related("task", "task__tenant").filter(pk=effect_id).first()
        if isinstance(effect_id, int) and 0 < effect_id < 2**63
        else None
    )
    if effect is None or not can(user, Action.VIEW, effect.task):
        raise TaskHidden(f"effect {str(effect_id)[:20]}")
    _decide(user, action, effect.task)
    return effect


def actor(
    user: Any, channel: str, task: Task | None = None, *, tenant_id: int | None = None
) -> Actor:
    """The audit actor of ``user``'s action on ``channel`` — one rule for every channel:

    * on MCP (``"mcp"``) the client acts as the principal of its session: ``principal``;
    * on the dashboard and the REST API (``"dashboard"``, ``"rest"``): ``operator`` when the
      user acts with operator rights — on ``task``, they may force-cancel it; without a task,
      an operator role in ``tenant_id``, or (no tenant either) in any tenant — else ``user``.
    """
    if channel not in CHANNELS:
        raise ValueError(f"unknown channel {channel!r}")
    if channel == "mcp":
        return Actor.for_user(user, kind="principal")
    if task is not None:
        is_operator = bool(can(user, Action.FORCE_CANCEL, task))
    elif tenant_id is not None:
        is_operator = Action.FORCE_CANCEL in {
            act for role in tenant_roles(user, tenant_id) for act in ROLE_ACTIONS[role]
        }
    else:
        is_operator = bool(tenants_where(user, Action.FORCE_CANCEL))
    return Actor.for_user(user, kind="operator" if is_operator else "user")


def assign_delegation(*, grantee: Any, task: Task, delegation: str) -> None:
    """Store a per-task right (``view`` or ``answer``); the caller authorized and audits it."""
    assign_perm(f"mcptasks.{DELEGATIONS[delegation]}", grantee, task)


def remove_delegation(*, grantee: Any, task: Task, delegation: str) -> None:
    remove_perm(f"mcptasks.{DELEGATIONS[delegation]}", grantee, task)


def delegations_of(task: Task) -> list[tuple[Any, str]]:
    """``(user, delegation)`` pairs granted on ``task``."""
    by_codename = {codename: name for name, codename in DELEGATIONS.items()}
    return [
        (row.user, by_codename[row.permission.codename])
        for row in TaskUserObjectPermission.objects.filter(content_object=task).select_related(
            "user", "permission"
        )
        if row.permission.codename in by_codename
    ]


def reconcilable_effects(user: Any) -> QuerySet[Any]:
    """Effects in ``unknown`` that ``user`` may reconcile: the operator's queue."""
    from mcptasks.models import Effect, EffectState

    effects = Effect.objects.filter(state=written(EffectState.UNKNOWN))  # see plans.written
    tenants = tenants_where(user, Action.RECONCILE)
    return effects if tenants is None else effects.filter(tenant_id__in=tenants)


def delegation_candidates(task: Task) -> QuerySet[Any]:
    """Who may be named on ``task`` (approver, viewer): members of its tenant but its owner."""
    return (
        User.objects.filter(is_active=True, memberships__tenant_id=task.tenant_id)
        .exclude(pk=task.principal_id)
        .distinct()
        .order_by("username")
    )


def may_name(grantor: Any, grantee: Any, task: Task, delegation: str) -> Decision:
    """May ``grantor`` give ``grantee`` this delegation on ``task``? As
    :func:`may_receive_delegation`, and an approver is never the grantor themselves (an
    operator naming themselves) nor an auditor of the tenant."""
    allowed = may_receive_delegation(grantee, task)
    if not allowed or delegation != "answer":
        return allowed
    if grantee.pk == grantor.pk:
        return Decision(False, "an operator may not name themselves approver")
    if Role.AUDITOR in tenant_roles(grantee, task.tenant_id):
        return Decision(False, "an auditor may not be named approver")
    return ALLOW


def may_receive_delegation(grantee: Any, task: Task) -> Decision:
    if grantee is None or not delegation_candidates(task).filter(pk=grantee.pk).exists():
        return Decision(False, "a delegation goes to another member of the task's tenant")
    return ALLOW
