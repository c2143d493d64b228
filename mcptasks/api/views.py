"""The REST API's task and token views (/api/v1/tasks…, /api/v1/tokens…). Approvals and
destinations are their own modules; audit lives in audit/api.py.

One view per operation (STYLE rule 4): parse with an input serializer, authorize through
access.py (:class:`~mcptasks.restkit.permissions.AccessPermission`), call a lifecycle verb or the
token service, render with an output serializer. No view assigns a state.

Errors are RFC 9457 problems: 404 for anything the caller may not see (never a 403 that tells
it exists), 403 for a visible object the caller may not act on, 409 for a move lifecycle
refuses, 422 for invalid input.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer

from mcptasks import access, inputs, lifecycle, queries, tokens
from mcptasks.access import Action
from mcptasks.api.filters import TaskFilter, TaskPagination, TokenFilter, TokenPagination
from mcptasks.api.serializers import (
    AnswerInputSerializer,
    CancelSerializer,
    DelegationInputSerializer,
    ForceCancelSerializer,
    IssuedTokenSerializer,
    ReconcileSerializer,
    TaskDetailSerializer,
    TaskSummarySerializer,
    TokenIssueSerializer,
    TokenRevokeSerializer,
    TokenSerializer,
)
from mcptasks.models import ApiToken, Effect, InputKind, InputRequest, InputState, Task
from mcptasks.restkit.errors import Conflict, problems, sentence
from mcptasks.restkit.views import (
    ApiListView,
    ApiView,
    TenantAdminView,
    actor_of,
    list_schema,
    parse,
)
from mcptasks.tools.answers import InvalidAnswer, validate_response, verdict_of

# ---------------------------------------------------------------- tasks
# What the detail shows of a task's relations (besides its tenant).
DETAIL_RELATED = ("principal", "token", "cancel_requested_by")


def visible_task(request: Request, task_id: str, action: Action = Action.VIEW) -> Task:
    """The task through access's doorway: 404 unless the caller sees it, 403 with access's
    reason when they may not do ``action`` to it (restkit.errors maps both)."""
    return access.task_for(request.user, task_id, action, related=DETAIL_RELATED)


def task_response(request: Request, task_id: str, code: int = status.HTTP_200_OK) -> Response:
    """The task's detail as the caller now sees it (after an action: its new state)."""
    task = visible_task(request, task_id)
    detail = queries.task_detail(request.user, task)
    return Response(
        TaskDetailSerializer(task, context={"viewer": request.user, "detail": detail}).data,
        status=code,
    )


@list_schema(
    "tasks_list",
    "tasks",
    "List tasks",
    "Tasks the caller may see (own tasks, tenant roles, delegations), newest first, with "
    "cursor pagination. Filters combine with AND.",
    TaskSummarySerializer,
)
class TaskListView(ApiListView):
    """The tasks the caller may see, newest first."""

    serializer_class = TaskSummarySerializer
    filterset_class = TaskFilter
    pagination_class = TaskPagination

    def get_queryset(self) -> Any:
        return (
            access.visible_tasks(self.request.user)
            .select_related("tenant", "principal")
            .defer(*queries.LIST_DEFERRED)
        )


class TaskDetailView(ApiView):
    access_action = Action.VIEW

    @extend_schema(
        operation_id="tasks_retrieve",
        tags=["tasks"],
        summary="Get a task",
        description="Binding fields, redacted arguments, input requests, effects, delegations, "
        "the audit timeline, and `task`: the MCP DetailedTask this viewer's "
        "tasks/get would return.",
        responses={200: TaskDetailSerializer, **problems(403, 404, 429)},
    )
    def get(self, request: Request, task_id: str) -> Response:
        return task_response(request, task_id)


class TaskActionView(ApiView):
    """``POST /tasks/{task_id}/…``: one lifecycle verb on one task.

    Finds the task through access.task_for (404 unless the caller sees it; 403 with access's
    reason when the action is on the task and they may not do it) or, for an action on one of
    its input requests or effects (``targets_task = False``), finds that (404 if it has none
    such) and authorizes it; then parses the body (422), acts (409 when lifecycle refuses the
    move), and answers the task's detail as it now is. A subclass names its ``access_action``
    and ``input_serializer`` and writes :meth:`act` (and :meth:`target`, if not the task).
    """

    input_serializer: type[Serializer]
    # Whether access decides on the task itself; else on the target, once it is found.
    targets_task = True

    def target(self, task: Task, **kwargs: str) -> Any:
        return task

    def act(self, request: Request, task: Task, target: Any, data: dict[str, Any]) -> None:
        raise NotImplementedError

    def post(self, request: Request, task_id: str, **kwargs: str) -> Response:
        if self.targets_task:
            task = visible_task(request, task_id, self.access_action or Action.VIEW)
            target: Any = task
        else:
            task = visible_task(request, task_id)
            target = self.target(task, **kwargs)
            self.check_object_permissions(request, target)
        self.act(request, task, target, parse(self.input_serializer, request))
        return task_response(request, task.pk)


def action_schema(
    operation_id: str, summary: str, description: str, request: type[Serializer], *codes: int
) -> Any:
    """The OpenAPI description of a task action (its answer is the task's detail)."""
    return extend_schema_view(
        post=extend_schema(
            operation_id=operation_id,
            tags=["task actions"],
            summary=summary,
            description=description,
            request=request,
            responses={200: TaskDetailSerializer, **problems(400, 403, 404, 422, 429, *codes)},
        )
    )


@action_schema(
    "tasks_answer_input",
    "Answer an input request",
    "Answers one pending input request (e.g. an operator approval). The answer is validated "
    "against the request's schema; separation of duties applies (a requester never answers "
    "their own approval gate). Recorded with via=api.",
    AnswerInputSerializer,
    409,
)
class TaskAnswerInputView(TaskActionView):
    access_action = Action.ANSWER
    input_serializer = AnswerInputSerializer
    targets_task = False

    def target(self, task: Task, **kwargs: str) -> InputRequest:
        input_request = task.input_requests.filter(key=kwargs["key"]).first()
        if input_request is None:
            raise NotFound(f"Input request {kwargs['key']!r} not found on this task.")
        return input_request

    def act(self, request: Request, task: Task, target: InputRequest, data: dict[str, Any]) -> None:
        if target.state != InputState.PENDING:
            raise Conflict(f"The input request {target.key!r} is {target.state}, not pending.")
        try:
            response = validate_response(target.method, target.params, data["response"])
            if target.kind == InputKind.APPROVAL:
                verdict, comment = verdict_of(response)
        except InvalidAnswer as exc:
            raise ValidationError({"response": [str(exc)]}) from None
        if target.kind == InputKind.APPROVAL:
            # An approval gate's answer is the caller's decision (as POST /approvals/…/decisions).
            try:
                lifecycle.task_decide_approval(
                    task_id=task.pk,
                    key=target.key,
                    reviewer=request.user,
                    verdict=verdict,
                    comment=comment,
                    actor=actor_of(request, task),
                    via="api",
                )
            except lifecycle.DecisionRefused as exc:
                raise Conflict(sentence(str(exc))) from None
            return
        lifecycle.task_answer_input(
            task_id=task.pk,
            key=target.key,
            response=response,
            actor=actor_of(request, task),
            via="api",
        )


@action_schema(
    "tasks_cancel",
    "Request cancellation",
    "Records cancel intent; a task that is not running is cancelled at once, a running one at "
    "its next safe point. 409 if the task already ended.",
    CancelSerializer,
    409,
)
class TaskCancelView(TaskActionView):
    access_action = Action.CANCEL
    input_serializer = CancelSerializer

    def act(self, request: Request, task: Task, target: Task, data: dict[str, Any]) -> None:
        outcome = lifecycle.task_request_cancel(
            task_id=task.pk,
            actor=actor_of(request, task),
            reason=data["reason"] or "REST API cancel",
        )
        if outcome.ended:
            raise Conflict(outcome.ended_reason)


@action_schema(
    "tasks_force_cancel",
    "Force-cancel a task",
    "Ends the task now whatever it is doing (operators); an effect in flight becomes unknown "
    "and waits for reconciliation. The reason is audited.",
    ForceCancelSerializer,
    409,
)
class TaskForceCancelView(TaskActionView):
    access_action = Action.FORCE_CANCEL
    input_serializer = ForceCancelSerializer

    def act(self, request: Request, task: Task, target: Task, data: dict[str, Any]) -> None:
        lifecycle.task_force_cancel(
            task_id=task.pk, actor=actor_of(request, task), reason=data["reason"]
        )


@action_schema(
    "tasks_reconcile_effect",
    "Reconcile an effect whose outcome is unknown",
    "applied (with the external reference): the step continues with that outcome; "
    "not_applied: the step runs again; fail: the task fails. On a task that already ended it "
    "only records what happened. A second decision is a 409; so is not_applied while the "
    "attempt that left the effect may still be alive (MCPTASKS_RECONCILE_MARGIN_S).",
    ReconcileSerializer,
    409,
)
class TaskReconcileEffectView(TaskActionView):
    access_action = Action.RECONCILE
    input_serializer = ReconcileSerializer
    targets_task = False

    def target(self, task: Task, **kwargs: str) -> Effect:
        effect_id = kwargs["effect_id"]
        effect = (
            task.effects.filter(pk=number).first()
            if (number := inputs.numeric_id(effect_id)) is not None
            else None
        )
        if effect is None:
            raise NotFound(f"Effect {effect_id} not found on this task.")
        return effect

    def act(self, request: Request, task: Task, target: Effect, data: dict[str, Any]) -> None:
        lifecycle.task_reconcile_effect(
            effect_id=target.pk,
            actor=actor_of(request, task),
            decision=data["decision"],
            note=data["reason"],
            external_ref=data["external_ref"],
        )


@action_schema(
    "tasks_grant_delegation",
    "Grant a per-task right",
    "Names a member of the task's tenant as a viewer (view) or an approver (answer, which "
    "includes view) of this one task. Operators; audited.",
    DelegationInputSerializer,
)
class TaskGrantDelegationView(TaskActionView):
    access_action = Action.GRANT
    input_serializer = DelegationInputSerializer

    def act(self, request: Request, task: Task, target: Task, data: dict[str, Any]) -> None:
        grantee = get_user_model().objects.filter(username=data["user"]).first()
        decision = access.may_name(request.user, grantee, task, data["delegation"])
        if not decision:
            raise ValidationError({"user": [sentence(decision.reason)]})
        lifecycle.task_grant_delegation(
            task_id=task.pk,
            actor=actor_of(request, task),
            grantee=grantee,
            delegation=data["delegation"],
        )


@action_schema(
    "tasks_revoke_delegation",
    "Revoke a per-task right",
    "Removes a delegation granted on this task. Operators; audited. 404 if the user does not "
    "hold it.",
    DelegationInputSerializer,
)
class TaskRevokeDelegationView(TaskActionView):
    access_action = Action.GRANT
    input_serializer = DelegationInputSerializer

    def act(self, request: Request, task: Task, target: Task, data: dict[str, Any]) -> None:
        grantee = get_user_model().objects.filter(username=data["user"]).first()
        try:
            if grantee is None:
                raise lifecycle.DelegationNotHeld(data["user"], data["delegation"])
            lifecycle.task_grant_delegation(
                task_id=task.pk,
                actor=actor_of(request, task),
                grantee=grantee,
                delegation=data["delegation"],
                revoke=True,
            )
        except lifecycle.DelegationNotHeld as exc:
            raise NotFound(str(exc)) from None


# ---------------------------------------------------------------- tokens
@list_schema(
    "tokens_list",
    "tokens",
    "List API tokens",
    "The caller's own tokens and every token of the tenants they administer (admins and "
    "operators). Secrets are never shown.",
    TokenSerializer,
)
class TokenListView(ApiListView):
    """API tokens the caller may see: their own, and all of the tenants they administer."""

    serializer_class = TokenSerializer
    filterset_class = TokenFilter
    pagination_class = TokenPagination

    def get_queryset(self) -> Any:
        return access.visible_tokens(self.request.user).select_related("tenant", "user")


class TokenIssueView(TenantAdminView):
    @extend_schema(
        operation_id="tokens_issue",
        tags=["tokens"],
        summary="Issue an API token",
        description="Issues a token to the caller in a tenant they administer (the caller's "
        "tenant by default). The secret is in this response only. Audited.",
        request=TokenIssueSerializer,
        responses={201: IssuedTokenSerializer, **problems(400, 403, 404, 422)},
    )
    def post(self, request: Request) -> Response:
        data = self.body(TokenIssueSerializer)
        tenant = self.tenant(
            data.get("tenant"),
            lambda user, tenant_id: access.may_issue_token(user, tenant_id=tenant_id, owner=user),
        )
        token, secret = tokens.issue_token(
            user=request.user,
            tenant=tenant,
            issued_by=request.user,
            actor=self.actor,
            name=data["name"],
            scopes=data["scopes"],
            expires_at=data["expires_at"],
        )
        token = ApiToken.objects.select_related("tenant", "user").get(pk=token.pk)
        body = {**TokenSerializer(token).data, "secret": secret}
        return Response(body, status=status.HTTP_201_CREATED, headers={"Cache-Control": "no-store"})


class TokenRevokeView(TenantAdminView):
    @extend_schema(
        operation_id="tokens_revoke",
        tags=["tokens"],
        summary="Revoke an API token",
        description="Revokes a token at once (its owner, or the tenant's admins and operators). "
        "Revoking a revoked token changes nothing. Audited.",
        request=TokenRevokeSerializer,
        responses={200: TokenSerializer, **problems(400, 403, 404, 422)},
    )
    def post(self, request: Request, token_id: str) -> Response:
        token = (
            access.visible_tokens(request.user).filter(pk=number).first()
            if (number := inputs.numeric_id(token_id)) is not None
            else None
        )
        if token is None:
            raise NotFound(f"Token {token_id} not found.")
        self.require(access.may_revoke_token(request.user, token))
        data = self.body(TokenRevokeSerializer)
        token = tokens.revoke_token(token_id=token.pk, actor=self.actor, reason=data["reason"])
        return Response(TokenSerializer(token).data)
