"""Input requests and approval gates: who may answer a request (:func:`may_answer`), who may
decide on a gate (:func:`may_decide`), the reviewer's own doorway to a gate of a task they may
not otherwise see (:func:`gate_for_reviewer`, :func:`task_for_reviewer`), and the set forms of
these questions for the inbox (:func:`answerable_inputs`)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet

from mcptasks.access.roles import (
    ALLOW,
    DELEGATIONS,
    NOT_A_MEMBER,
    Action,
    Decision,
    _authenticated,
    has_delegation,
    holds_membership,
    member_tenant_ids,
    requesters,
    role_allows,
    tenant_roles,
    tenants_where,
)
from mcptasks.access.tasks import get_visible_task, task_for
from mcptasks.models import (
    Audience,
    InputKind,
    InputRequest,
    InputState,
    ReviewerGroup,
    Role,
    Task,
    TaskUserObjectPermission,
)
from mcptasks.plans import written

User = get_user_model()


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
    if request.forbid_self_approval and user.pk in request_requesters(request, task):
        return Decision(False, SELF_APPROVAL)
    is_owner = user.pk == task.principal_id
    is_operator = role_allows(user, task, Action.ANSWER)
    delegated = has_delegation(user, task, DELEGATIONS["answer"])
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


SELF_APPROVAL = "the requester may not approve their own request"


def request_requesters(request: InputRequest, task: Task) -> set[int]:
    """Who may never answer ``request`` when it forbids self-approval, nor decide on it when it
    is a gate: the people behind its task as recorded on it when it was made (the principal
    and the creating token's issuer; the same that :func:`answerable_inputs` excludes), or, for
    a request not saved, the task's :func:`requesters`."""
    if request.principal_id is None:
        return requesters(task)
    return {request.principal_id} | (
        {request.token_issuer_id} if request.token_issuer_id is not None else set()
    )


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
    roles = tenant_roles(user, tenant_id)
    if roles & set(policy.get("roles") or ()):
        return True
    if (
        policy.get("named_approvers", True)
        and task is not None
        and has_delegation(user, task, DELEGATIONS["answer"])
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
    if user.pk in request_requesters(request, task):
        return Decision(False, SELF_APPROVAL)
    roles = tenant_roles(user, task.tenant_id)
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
            tenant_id__in=member_tenant_ids(user),
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


def input_for(user: Any, task_id: Any, key: Any) -> tuple[Task, InputRequest | None]:
    """The doorway to one input request: the task ``user`` may see (:func:`task_for`) with its
    request ``key`` (None when it has none such) — or, for an eligible reviewer who may not
    otherwise see the task, its approval gate (:func:`gate_for_reviewer`). Raises
    :class:`TaskHidden` for anyone else (the miss counts, as :func:`task_for`'s)."""
    task = get_visible_task(user, task_id)
    if task is None:
        reviewed = gate_for_reviewer(user, task_id, key)
        if reviewed is not None:
            return reviewed
        # Seen meanwhile (a grant just given) or, as nearly always, TaskHidden: the miss counts.
        task = task_for(user, task_id)
    request = task.input_requests.filter(key=key).first() if isinstance(key, str) else None
    return task, request


def task_for_reviewer(user: Any, task_id: Any, keys: list[Any]) -> Task | None:
    """Reviewer visibility on MCP: the task ``task_id`` when one of ``keys`` names a pending
    client-audience approval gate of it that ``user`` may decide on (:func:`gate_for_reviewer`);
    what lets ``tasks/update`` take a reviewer's decision on a task they may not see."""
    for key in keys[:10]:
        found = gate_for_reviewer(user, task_id, key)
        if found is not None and found[1].state == "pending" and found[1].audience == Audience.ANY:
            return found[0]
    return None


def answerable_requests(user: Any, task: Task, *, channel: str) -> list[InputRequest]:
    """Pending requests of ``task`` that ``user`` may answer on ``channel``.

    On ``mcp`` (the client) only ``client`` and ``any`` audiences are listed, as the wire
    ``inputRequests`` of a task.
    """
    pending = list(task.input_requests.filter(state="pending").order_by("created_at", "id"))
    if channel == "mcp":
        pending = [r for r in pending if r.audience in (Audience.CLIENT, Audience.ANY)]
    return [r for r in pending if may_answer(user, r, task)]


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
    whether any gate is among them — so a page with no pending gate reads none.

    One query of the input requests alone (and of the user's answer delegations): the people
    behind a request's task, whom the self-approval exclusions name, are recorded on the
    request (``principal``, ``token_issuer``), so no task is read."""
    if not _authenticated(user):
        return InputRequest.objects.none()
    # The state and the audiences are written into the statement (plans.written): a prepared
    # statement's generic plan then knows the few pending requests from the many answered ones
    # and keeps reading them by index (bound, it looked costlier at a million tasks, and every
    # page planned its inbox queries afresh over the task partitions they join).
    pending = InputRequest.objects.filter(
        Q(audience=written(Audience.OPERATOR)) | Q(audience=written(Audience.ANY)),
        state=written(InputState.PENDING),
        tenant_id__in=member_tenant_ids(user),
    )
    tenants = tenants_where(user, Action.ANSWER)
    if tenants is not None:
        delegated = TaskUserObjectPermission.objects.filter(
            user=user, permission__codename=DELEGATIONS["answer"]
        ).values("content_object_id")
        pending = pending.filter(
            Q(tenant_id__in=tenants)
            | Q(task_id__in=delegated)
            | Q(audience=written(Audience.ANY), principal=user)
        )
    return pending.exclude(forbid_self_approval=True, principal=user).exclude(
        forbid_self_approval=True, token_issuer=user
    )


def refused_gates(user: Any, pending: QuerySet[InputRequest]) -> list[InputRequest]:
    """The approval gates among ``pending`` whose policy does not let ``user`` decide (pending
    gates are few: one query reads them)."""
    gates = pending.filter(kind=written(InputKind.APPROVAL)).select_related("task")
    return [gate for gate in gates if not may_decide(user, gate, gate.task)]


def refused_gate_ids(user: Any, pending: QuerySet[InputRequest]) -> list[int]:
    return [gate.pk for gate in refused_gates(user, pending)]


def answer_decisions(user: Any, task: Task, requests: list[InputRequest]) -> dict[int, Decision]:
    """:func:`may_answer` for several requests of one task, by request pk, asking each distinct
    (audience, self-approval, recorded requesters) case once — may_answer reads nothing else of
    a request — so a page costs a bounded number of queries however many requests it shows."""
    decided: dict[tuple[str, bool, int | None, int | None], Decision] = {}
    decisions: dict[int, Decision] = {}
    for request in requests:
        if request.kind == InputKind.APPROVAL:
            decisions[request.pk] = may_decide(user, request, task)
            continue
        case = (
            request.audience,
            request.forbid_self_approval,
            request.principal_id,
            request.token_issuer_id,
        )
        if case not in decided:
            decided[case] = may_answer(user, request, task)
        decisions[request.pk] = decided[case]
    return decisions
