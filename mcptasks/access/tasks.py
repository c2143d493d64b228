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
from django.db.models import Q, QuerySet
from guardian.shortcuts import assign_perm, remove_perm

from mcptasks import limits
from mcptasks.models import (
    ApiToken,
    Audience,
    InputKind,
    InputRequest,
    Membership,
    ReviewerGroup,
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


def member_tenants(user: Any) -> set[int]:
    """The tenants ``user`` is a member of now (any role), asked once per user object."""
    return set(_roles(user)) if _authenticated(user) else set()


def holds_membership(user: Any, tenant_id: int) -> bool:
    """Is ``user`` (active) a member of ``tenant_id`` now? Asked at every authentication of a
    token or JWT: a token acts only while its owner belongs to the token's tenant."""
    return tenant_id in member_tenants(user)


def refresh(user: Any) -> None:
    """Forget what was read of ``user``'s roles: the next question reads them again (long-lived
    streams and sockets re-check their viewer this way)."""
    for name in ("_mcptasks_roles", "_mcptasks_staff_operator"):
        if hasattr(user, name):
            delattr(user, name)


def _is_staff_operator(user: Any) -> bool:
    """Staff users holding an operator role somewhere read every audit chain (the ``system``
    chain included). They act — on tasks, tokens, tenants — only where they hold a role."""
    return bool(user.is_staff) and Membership.objects.filter(user=user, role=Role.OPERATOR).exists()


def _delegated(user: Any, task: Task, codename: str) -> bool:
    return TaskUserObjectPermission.objects.filter(
        user=user, content_object=task, permission__codename=codename
    ).exists()


def _role_allows(user: Any, task: Task, action: Action) -> bool:
    roles = _tenant_roles(user, task.tenant_id)
    return any(action in ROLE_ACTIONS[role] for role in roles)


NOT_A_MEMBER = Decision(False, "not a member of the task's tenant")


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
        cache = getattr(user, "_mcptasks_roles", None)
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
    member_of = Membership.objects.filter(user=user).values("tenant_id")
    return Task.objects.filter(Q(tenant_id__in=member_of) & visible)


def get_visible_task(user: Any, task_id: Any, related: tuple[str, ...] = ()) -> Task | None:
    """The task if ``user`` may see it, else None — unknown and forbidden look the same, and
    cost the same: visibility is decided in the query that fetches (:func:`visible_tasks`
    narrowed to the id), so "not yours" and "not there" are one statement that finds no row.
    ``related``: relations to load with it (besides the tenant)."""
    if not isinstance(task_id, str) or not task_id or len(task_id) > 64:
        return None
    return visible_tasks(user).select_related("tenant", *related).filter(pk=task_id).first()


class TaskHidden(LookupError):
    """No task this actor may see has this id (unknown, foreign, expired): every channel says
    "not found" (MCP -32602, REST 404, dashboard 404)."""


class Refused(PermissionError):
    """The actor may see the task but not do this to it (MCP -32602, REST 403, dashboard 403)."""

    def __init__(self, task: Task, decision: Decision) -> None:
        super().__init__(decision.reason)
        self.task = task
        self.decision = decision


def task_for(
    user: Any, task_id: Any, action: Action = Action.VIEW, *, related: tuple[str, ...] = ()
) -> Task:
    """The doorway: the task ``user`` may do ``action`` to, fetched and decided in one call, on
    every channel (MCP, REST, dashboard, consumers). Raises :class:`TaskHidden` when the user
    may not see it (the miss counts against their budget of unknown-id lookups, past which
    ``limits.Throttled`` is raised) and :class:`Refused` when they may see it but not do
    ``action``."""
    task = get_visible_task(user, task_id, related)
    if task is None:
        if user is not None and user.is_authenticated:
            limits.check_unknown_lookup(principal_id=user.pk, task_id=str(task_id)[:64])
        raise TaskHidden(str(task_id)[:64])
    if action != Action.VIEW:
        decision = can(user, action, task)
        if not decision:
            raise Refused(task, decision)
    return task


def may_answer(user: Any, request: InputRequest, task: Task) -> Decision:
    """May ``user`` answer this input request? Audience, delegation and separation of duties.

    Enforced for every channel (MCP ``tasks/update``, dashboard, REST API).
    """
    if user is None or not user.is_authenticated or not user.is_active:
        return Decision(False, "not authenticated")
    if not holds_membership(user, task.tenant_id):
        return NOT_A_MEMBER
    if request.kind == InputKind.APPROVAL:
        return may_decide(user, request, task)
    if request.forbid_self_approval and user.pk in requesters(task):
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


# ---------------------------------------------------------------- approval gates
# Who may decide on an approval gate (ctx.approve): the gate's policy names the eligible set —
# roles in the task's tenant, reviewer groups of the tenant, named users — and some people are
# never eligible whatever the policy says. Per-task delegations ("named approver") grant
# a gate's eligibility only where its policy allows named approvers (``named_approvers``), and
# naming is refused for oneself and for auditors (may_name).


def gate_requesters(task: Task) -> dict[int, str]:
    """:func:`requesters` — who may never decide on the task's gates (the principal and the
    creating token's issuer) — with the reason, the same may_answer gives."""
    return dict.fromkeys(requesters(task), "the requester may not approve their own request")


def reviewer_group_names(user: Any, tenant_id: int) -> set[str]:
    """The reviewer groups of ``tenant_id`` that ``user`` belongs to."""
    return set(
        ReviewerGroup.objects.filter(tenant_id=tenant_id, members=user).values_list(
            "name", flat=True
        )
    )


def gate_policy(request: InputRequest) -> dict[str, Any]:
    return dict((request.gate or {}).get("policy") or {})


def _eligible_by_policy(
    user: Any, policy: dict[str, Any], tenant_id: int, task: Task | None = None
) -> bool:
    roles = _tenant_roles(user, tenant_id)
    if roles & set(policy.get("roles") or ()):
        return True
    if (
        policy.get("named_approvers", True)
        and task is not None
        and _delegated(user, task, DELEGATIONS["answer"])
    ):
        return True
    if user.get_username() in set(policy.get("users") or ()):
        return True
    groups = set(policy.get("groups") or ())
    return bool(groups) and bool(reviewer_group_names(user, tenant_id) & groups)


def may_decide(user: Any, request: InputRequest, task: Task, *, now: Any = None) -> Decision:
    """May ``user`` approve or reject this approval gate? The same answer on every channel
    (dashboard, REST API, MCP ``tasks/update``). Whether the gate is still open is a question of
    state, lifecycle's (a closed gate is a conflict, not a refusal)."""
    from django.utils import timezone

    if not _authenticated(user):
        return Decision(False, "not authenticated")
    if request.kind != InputKind.APPROVAL:
        return Decision(False, "this input request is not an approval gate")
    if request.deadline_at is not None and request.deadline_at <= (now or timezone.now()):
        return Decision(False, "the approval gate has expired")
    requesters = gate_requesters(task)
    if user.pk in requesters:
        return Decision(False, requesters[user.pk])
    roles = _tenant_roles(user, task.tenant_id)
    if not roles:
        return Decision(False, "not a member of the task's tenant")
    if Role.AUDITOR in roles:
        return Decision(False, "an auditor may not decide on approvals")
    if not _eligible_by_policy(user, gate_policy(request), task.tenant_id, task):
        return Decision(False, "not an eligible reviewer under the gate's policy")
    return ALLOW


def eligible_reviewers(request: InputRequest, task: Task) -> list[Any]:
    """Who else may decide on the gate now (for the approval page): tenant members the policy
    names, less those :func:`may_decide` refuses and those who decided already."""
    decided = set(request.decisions.values_list("reviewer_id", flat=True))
    candidates = (
        User.objects.filter(is_active=True, memberships__tenant_id=task.tenant_id)
        .exclude(pk__in=decided)
        .distinct()
        .order_by("username")
    )
    return [user for user in candidates if may_decide(user, request, task)]


def gate_for_reviewer(user: Any, task_id: Any, key: Any) -> tuple[Task, InputRequest] | None:
    """Reviewer visibility: the approval gate ``key`` of ``task_id`` with its task, for a
    user whom a gate's policy names but who may not otherwise see the task (a plain member in
    a reviewer group, a user the policy names) — while they may decide on the pending gate
    (:func:`may_decide`), or once they have decided on it. It shows exactly the approval page
    and takes the decision on every channel (dashboard, REST API, MCP ``tasks/update``); the
    task page, ``tasks/get`` and the task's live stream stay :func:`visible_tasks`'. None for
    anyone else, an unknown id or key alike (one statement, then the decision)."""
    if not _authenticated(user) or not isinstance(task_id, str) or not task_id:
        return None
    if len(task_id) > 64 or not isinstance(key, str) or not key or len(key) > 200:
        return None
    gate = (
        InputRequest.objects.select_related("task", "task__tenant", "task__principal")
        .filter(
            task_id=task_id,
            key=key,
            kind=InputKind.APPROVAL,
            tenant_id__in=sorted(member_tenants(user)),
        )
        .first()
    )
    if gate is None:
        return None
    task = gate.task
    if gate.state == "pending" and may_decide(user, gate, task):
        return task, gate
    if gate.decisions.filter(reviewer=user).exists():
        return task, gate
    return None


def task_for_reviewer(user: Any, task_id: Any, keys: list[Any]) -> Task | None:
    """Reviewer visibility on MCP: the task ``task_id`` when one of ``keys`` names a pending
    client-audience approval gate of it that ``user`` may decide on (:func:`gate_for_reviewer`);
    what lets ``tasks/update`` take a reviewer's decision on a task they may not see."""
    for key in keys[:10]:
        found = gate_for_reviewer(user, task_id, key)
        if found is not None and found[1].state == "pending" and found[1].audience == Audience.ANY:
            return found[0]
    return None


def member_tenant_ids(user: Any) -> list[int]:
    """The tenants ``user`` is a member of (any role)."""
    return sorted(_roles(user)) if _authenticated(user) else []


def may_manage_approvals(user: Any, tenant_id: int) -> Decision:
    """Reviewer groups and approval policies of a tenant are managed by its admins."""
    if not _authenticated(user):
        return Decision(False, "not authenticated")
    if Role.ADMIN in _tenant_roles(user, tenant_id):
        return ALLOW
    return Decision(False, "only the tenant's admins manage reviewer groups and approval policies")


def may_manage_destinations(user: Any, tenant_id: int) -> Decision:
    """A tenant's event destinations (webhooks, SIEM streams) are created, changed and deleted
    by its admins."""
    if not _authenticated(user):
        return Decision(False, "not authenticated")
    if Role.ADMIN in _tenant_roles(user, tenant_id):
        return ALLOW
    return Decision(False, "only the tenant's admins manage its event destinations")


def may_see_deliveries(user: Any, tenant_id: int) -> Decision:
    """Destinations and their delivery logs are read by the tenant's admins and operators, who
    may also redeliver a dead-lettered delivery (never its secret: nobody reads that)."""
    if not _authenticated(user):
        return Decision(False, "not authenticated")
    if _tenant_roles(user, tenant_id) & {Role.ADMIN, Role.OPERATOR}:
        return ALLOW
    return Decision(False, "only the tenant's admins and operators see its event destinations")


def destination_tenants(user: Any) -> list[int]:
    """Tenants whose destinations ``user`` may see (:func:`may_see_deliveries`)."""
    if not _authenticated(user):
        return []
    return sorted(t for t, roles in _roles(user).items() if roles & {Role.ADMIN, Role.OPERATOR})


def requesters(task: Task) -> set[int]:
    """The people behind ``task``: its principal, and whoever issued the token that created
    it — a token issued for someone else does not make its issuer a bystander (no
    self-approval by proxy)."""
    people = {task.principal_id}
    if task.token_id is not None:
        issuer = (
            task.token.issued_by_id  # type: ignore[union-attr]
            if Task.token.is_cached(task)
            else ApiToken.objects.filter(pk=task.token_id)
            .values_list("issued_by_id", flat=True)
            .first()
        )
        if issuer is not None:
            people.add(issuer)
    return people


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
    return [
        (row.user, by_codename[row.permission.codename])
        for row in TaskUserObjectPermission.objects.filter(content_object=task).select_related(
            "user", "permission"
        )
        if row.permission.codename in by_codename
    ]


# ---------------------------------------------------------------- listings across tasks
# The set forms of the questions above, for the dashboard and the REST API: each is one query
# (or a queryset) shaped for the indexes, never a per-row check.
AUDIT_ROLES = frozenset({Role.AUDITOR, Role.OPERATOR, Role.ADMIN})
TOKEN_ADMIN_ROLES = frozenset({Role.ADMIN, Role.OPERATOR})


def _roles(user: Any) -> dict[int, set[str]]:
    cache = getattr(user, "_mcptasks_roles", None)
    if cache is None:
        cache = roles_by_tenant(user)
        user._mcptasks_roles = cache
    return cache


def _authenticated(user: Any) -> bool:
    return user is not None and user.is_authenticated and user.is_active


def _staff_operator(user: Any) -> bool:
    """:func:`_is_staff_operator`, asked once per user object (one request, like the roles)."""
    cached = getattr(user, "_mcptasks_staff_operator", None)
    if cached is None:
        cached = _is_staff_operator(user)
        user._mcptasks_staff_operator = cached
    return bool(cached)


def tenants_where(user: Any, action: Action) -> list[int] | None:
    """Tenant ids where a role of ``user`` carries ``action`` over every task (a staff operator
    too acts only where they hold a role; None, every tenant, is no longer answered). Owner
    rights and delegations are not included."""
    if not _authenticated(user):
        return []
    return sorted(
        tenant_id
        for tenant_id, roles in _roles(user).items()
        if any(action in ROLE_ACTIONS[role] for role in roles)
    )


def operations_tenants(user: Any) -> list[int]:
    """Tenants whose figures the operations page shows ``user``: where a role of theirs may
    force-cancel every task (operators; not members, tenant admins or auditors). Empty: no
    operations page, and no link to it."""
    return tenants_where(user, Action.FORCE_CANCEL) or []


def visible_tasks_for_listing(user: Any, tenant_id: int | None = None) -> QuerySet[Task]:
    """:func:`visible_tasks`, optionally within one tenant, written so that the planner can walk
    the ``(tenant, created)`` or ``(principal, created)`` index in order: a tenant the user sees
    whole is a plain tenant filter, and delegated task ids are read first (they are few)."""
    if not _authenticated(user):
        return Task.objects.none()
    seeing = tenants_where(user, Action.VIEW)
    tasks = Task.objects.all() if tenant_id is None else Task.objects.filter(tenant_id=tenant_id)
    if seeing is None or (tenant_id is not None and tenant_id in seeing):
        return tasks
    delegated = list(
        TaskUserObjectPermission.objects.filter(
            user=user, permission__codename__in=list(DELEGATIONS.values())
        )
        .values_list("content_object_id", flat=True)
        .distinct()
    )
    members_of = sorted(member_tenants(user))
    if tenant_id is not None and tenant_id not in members_of:
        return Task.objects.none()
    visible = Q(principal=user)
    if delegated:
        visible |= Q(pk__in=delegated)
    if tenant_id is None and seeing:
        visible |= Q(tenant_id__in=seeing)
    return tasks.filter(visible, tenant_id__in=members_of)


def answerable_inputs(user: Any) -> QuerySet[InputRequest]:
    """Pending ``operator`` / ``any`` input requests ``user`` may answer outside MCP (dashboard,
    REST API), across tasks: the set form of :func:`may_answer` (operator roles, named-approver
    grants, the owner for ``any``, never a requester's own self-approval gate)."""
    pending = answerable_inputs_before_gates(user)
    # An approval gate is listed only to those its policy lets decide.
    refused = refused_gate_ids(user, pending)
    return pending.exclude(pk__in=refused) if refused else pending


def answerable_inputs_before_gates(user: Any) -> QuerySet[InputRequest]:
    """:func:`answerable_inputs` before its approval gates are checked against their policies
    (:func:`refused_gate_ids`), for a caller that first asks, in the query it runs anyway,
    whether any gate is among them — so a page with no pending gate reads none."""
    if not _authenticated(user):
        return InputRequest.objects.none()
    pending = InputRequest.objects.filter(
        state="pending", audience__in=[Audience.OPERATOR, Audience.ANY]
    )
    tenants = tenants_where(user, Action.ANSWER)
    # Who is behind a request's task (its principal, its token's issuer) decides the
    # self-approval exclusions. A user who answers in whole tenants (an operator) passes nearly
    # every pending request on the tenant test, so joining each request's task would read one
    # task per request, more as the task table grows; instead the user's own waiting tasks are
    # read once (few: a hashed subplan) and each request's task id is looked up in them. For
    # the others the few requests left by the tests below are joined to their tasks.
    by_tenant = tenants is None or bool(tenants)
    waiting = Task.objects.filter(input_requests__state="pending")
    own = waiting.filter(principal=user).values("pk")
    by_proxy = waiting.filter(
        token_id__in=ApiToken.objects.filter(issued_by=user).values("pk")
    ).values("pk")
    if tenants is not None:
        delegated = TaskUserObjectPermission.objects.filter(
            user=user, permission__codename=DELEGATIONS["answer"]
        ).values("content_object_id")
        pending = pending.filter(
            Q(tenant_id__in=tenants)
            | Q(task_id__in=delegated)
            | Q(
                audience=Audience.ANY,
                **({"task_id__in": own} if by_tenant else {"task__principal": user}),
            )
        )
    pending = pending.filter(tenant_id__in=sorted(member_tenants(user)))
    if by_tenant:
        return pending.exclude(forbid_self_approval=True, task_id__in=own).exclude(
            forbid_self_approval=True, task_id__in=by_proxy
        )
    return pending.exclude(forbid_self_approval=True, task__principal=user).exclude(
        forbid_self_approval=True, task__token__issued_by=user
    )


def refused_gates(user: Any, pending: QuerySet[InputRequest]) -> list[InputRequest]:
    """The approval gates among ``pending`` whose policy does not let ``user`` decide (pending
    gates are few: one query reads them)."""
    gates = pending.filter(kind=InputKind.APPROVAL).select_related("task")
    return [gate for gate in gates if not may_decide(user, gate, gate.task)]


def refused_gate_ids(user: Any, pending: QuerySet[InputRequest]) -> list[int]:
    return [gate.pk for gate in refused_gates(user, pending)]


def answer_decisions(user: Any, task: Task, requests: list[InputRequest]) -> dict[int, Decision]:
    """:func:`may_answer` for several requests of one task, by request pk, asking each distinct
    (audience, self-approval) case once — may_answer reads nothing else of a request — so a
    page costs a bounded number of queries however many requests it shows."""
    decided: dict[tuple[str, bool], Decision] = {}
    decisions: dict[int, Decision] = {}
    for request in requests:
        if request.kind == InputKind.APPROVAL:
            decisions[request.pk] = may_decide(user, request, task)
            continue
        case = (request.audience, request.forbid_self_approval)
        if case not in decided:
            decided[case] = may_answer(user, request, task)
        decisions[request.pk] = decided[case]
    return decisions


def tasks_where(user: Any, action: Action) -> QuerySet[Task]:
    """Tasks on which a tenant role lets ``user`` do ``action`` (e.g. force cancel)."""
    tenants = tenants_where(user, action)
    return Task.objects.all() if tenants is None else Task.objects.filter(tenant_id__in=tenants)


def reconcilable_effects(user: Any) -> QuerySet[Any]:
    """Effects in ``unknown`` that ``user`` may reconcile: the operator's queue."""
    from mcptasks.models import Effect, EffectState

    effects = Effect.objects.filter(state=EffectState.UNKNOWN)
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
    if Role.AUDITOR in _tenant_roles(grantee, task.tenant_id):
        return Decision(False, "an auditor may not be named approver")
    return ALLOW


def may_receive_delegation(grantee: Any, task: Task) -> Decision:
    if grantee is None or not delegation_candidates(task).filter(pk=grantee.pk).exists():
        return Decision(False, "a delegation goes to another member of the task's tenant")
    return ALLOW


def audit_tenants(user: Any) -> list[int] | None:
    """Tenants whose audit trail ``user`` may read (auditors, operators, tenant admins); None
    means every chain, the ``system`` chain included (staff operators)."""
    if not _authenticated(user):
        return []
    if _staff_operator(user):
        return None
    return sorted(tenant_id for tenant_id, roles in _roles(user).items() if roles & AUDIT_ROLES)


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
        tenant_id for tenant_id, roles in _roles(user).items() if roles & TOKEN_ADMIN_ROLES
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
    return _authenticated(user) and tenant_id in _roles(user)
