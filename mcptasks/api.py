"""The REST API (/api/v1/): tasks, their actions, and API tokens. Audit lives in audit/api.py.

One view per operation (STYLE rule 4): parse with an input serializer, authorize through
access.py (:class:`~mcptasks.api_permissions.AccessPermission`), call a lifecycle verb or the
token service, render with an output serializer. No view assigns a state.

Errors are RFC 9457 problems: 404 for anything the caller may not see (never a 403 that tells
it exists), 403 for a visible object the caller may not act on, 409 for a move lifecycle
refuses, 422 for invalid input.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.contrib.auth import get_user_model
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import generics, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import APIException, NotFound, ParseError, ValidationError
from rest_framework.parsers import JSONParser
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer
from rest_framework.views import APIView

from audit.record import Actor
from mcptasks import access, db_retry, inputs, lifecycle, queries, tokens
from mcptasks.access import Action
from mcptasks.api_auth import BearerTokenAuthentication
from mcptasks.api_errors import problem_exception_handler
from mcptasks.api_filters import TaskFilter, TaskPagination, TokenFilter, TokenPagination
from mcptasks.api_permissions import AccessPermission, TokenIssue
from mcptasks.api_serializers import (
    AnswerInputSerializer,
    CancelSerializer,
    DelegationInputSerializer,
    ForceCancelSerializer,
    IssuedTokenSerializer,
    ProblemSerializer,
    ReconcileSerializer,
    TaskDetailSerializer,
    TaskSummarySerializer,
    TokenIssueSerializer,
    TokenRevokeSerializer,
    TokenSerializer,
)
from mcptasks.auth import Principal
from mcptasks.models import ApiToken, Effect, InputKind, InputRequest, InputState, Task, Tenant
from mcptasks.tools.answers import InvalidAnswer, validate_response, verdict_of

# ---------------------------------------------------------------- errors
log = logging.getLogger(__name__)


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "Conflict"
    default_code = "conflict"


class DatabaseUnavailable(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The database is unavailable"
    default_code = "database_unavailable"


class Unprocessable(APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_detail = "Invalid input"
    default_code = "invalid"


def _sentence(text: str) -> str:
    text = text.strip()
    return (text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")) if text else text


def as_http_error(exc: Exception) -> Exception:
    """Lifecycle refusals and validation errors as the API's HTTP errors."""
    if isinstance(exc, lifecycle.TaskNotFound):
        return NotFound("Task not found.")
    if isinstance(exc, lifecycle.InputNotPending):
        return Conflict(
            f"The input request {exc} is no longer pending: it was answered, superseded or expired."
        )
    if isinstance(exc, lifecycle.EffectNotUnknown):
        return Conflict(
            "The effect's outcome is not unknown: it was already reconciled, or it "
            "never needed reconciling."
        )
    if isinstance(exc, (lifecycle.InvalidTransition, lifecycle.AttemptMayBeAlive)):
        return Conflict(_sentence(str(exc)))
    if isinstance(exc, ValidationError):
        return Unprocessable(exc.detail)
    return exc


def _first_error(errors: Any, path: str = "") -> str:
    """The first message of a DRF error structure, prefixed by where it is."""
    if isinstance(errors, dict):
        for key, value in errors.items():
            where = key if key == "non_field_errors" else f"{path}.{key}" if path else str(key)
            return _first_error(value, "" if key == "non_field_errors" else where)
    if isinstance(errors, list) and errors:
        return _first_error(errors[0], path)
    return f"{path}: {errors}" if path else str(errors)


def problem_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """problem+json for every error of the API, with a specific ``detail`` for 422."""
    response = problem_exception_handler(as_http_error(exc), context)
    if response is not None and response.status_code == 422 and "errors" in response.data:
        response.data["detail"] = _sentence(_first_error(response.data["errors"]))
    return response


PROBLEM = "application/problem+json"
PROBLEM_TEXT = {
    400: "Malformed request body.",
    401: "No valid credentials (session, or Authorization: Bearer with the 'api' scope).",
    403: "Visible, but the caller may not do this (or CSRF failure with a session).",
    404: "Unknown, or not visible to the caller.",
    409: "The object's state does not allow this now.",
    422: "Invalid input; errors names each field.",
    429: "Too many lookups of task ids the caller cannot see (MCPTASKS_UNKNOWN_TASK_BURST); "
    "retry after Retry-After seconds.",
}


def problems(*codes: int) -> dict[Any, OpenApiResponse]:
    """OpenAPI responses for the problem statuses an operation may answer (401 always)."""
    return {
        (code, PROBLEM): OpenApiResponse(ProblemSerializer, description=PROBLEM_TEXT[code])
        for code in sorted({401, *codes})
    }


# ---------------------------------------------------------------- base views
class BearerTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """Documents ``Authorization: Bearer mcpt_…`` (an API token with the ``api`` scope)."""

    target_class = "mcptasks.api_auth.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API token with the 'api' scope: mcpt_<lookup>_<secret>.",
        }


class BoundedJSONParser(JSONParser):
    """JSON bodies, refused (400) when arrays and objects nest deeper than any operation needs:
    what reads the body after the parser (serializers, schema validation, the database's JSON
    functions) recurses, and the parser itself gives up somewhere past a thousand levels."""

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
            too_deep = inputs.nesting_exceeds(data)
        except RecursionError:
            too_deep = True
        if too_deep:
            raise ParseError(
                f"JSON parse error - arrays and objects nest more than {inputs.MAX_JSON_DEPTH} "
                "levels deep."
            )
        return data


class ApiView(APIView):
    """What every API view shares: authentication (Bearer first, so a missing credential is a
    401 with a challenge), the one permission class, JSON in and out, problem errors."""

    authentication_classes = [BearerTokenAuthentication, SessionAuthentication]
    permission_classes = [AccessPermission]
    parser_classes = [BoundedJSONParser]
    renderer_classes = [JSONRenderer]
    access_action: Action | None = None
    database_error: Exception | None = None  # the transient one this try hit, if any

    def get_exception_handler(self) -> Callable[[Exception, dict[str, Any]], Response | None]:
        return problem_handler

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        """A transient database error: GETs, and writes that had sent no writing statement yet
        (nothing applied), are retried on a fresh connection (db_retry); a write that may have
        applied is not repeated, and answers 503 saying its outcome is unknown."""
        safe = request.method in ("GET", "HEAD", "OPTIONS")

        def once() -> Any:
            self.database_error = None
            response = super(ApiView, self).dispatch(request, *args, **kwargs)
            if self.database_error is not None:  # db_retry decides whether to repeat it
                raise self.database_error
            return response

        try:
            return db_retry.run(once, safe=safe, what=f"{request.method} {request.path}")
        except db_retry.TRANSIENT:
            return self.response  # the 503 of the last try

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, db_retry.TRANSIENT):
            self.database_error = exc
            log.warning("database error on %s", self.request.path, exc_info=True)
            exc = DatabaseUnavailable(
                "The database failed while this request ran; nothing was changed, retry it."
                if self.request.method in ("GET", "HEAD", "OPTIONS")
                else "The database failed while this request ran; whether it took effect is "
                "unknown. Read the task before repeating it."
            )
            response = super().handle_exception(exc)
            response["Retry-After"] = "1"
            return response
        return super().handle_exception(exc)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        if any("\x00" in str(value) for value in kwargs.values()):
            raise NotFound("Not found.")  # no object's id or key holds a NUL character

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        # Always JSON: a client's odd Accept header never turns an answer into a 406.
        return super().perform_content_negotiation(request, force=True)


class ApiListView(ApiView, generics.ListAPIView):
    """A list (GET) with django-filter filters and cursor pagination."""


def list_schema(
    operation_id: str, tag: str, summary: str, description: str, serializer: type[Serializer]
) -> Any:
    """The OpenAPI description of a list (a page of ``serializer`` rows)."""
    return extend_schema_view(
        get=extend_schema(
            operation_id=operation_id,
            tags=[tag],
            summary=summary,
            description=description,
            responses={200: serializer(many=True), **problems(403, 422)},
        )
    )


def parse[S: Serializer](serializer_class: type[S], request: Request) -> dict[str, Any]:
    """Validate the request body; invalid input is a 422 naming the field."""
    data = request.data
    if not isinstance(data, dict):
        raise Unprocessable({"non_field_errors": ["The body must be a JSON object."]})
    unstorable = inputs.unstorable_text(data)
    if unstorable is not None:
        raise Unprocessable(
            {
                unstorable or "non_field_errors": [
                    "Text must be valid Unicode without NUL characters."
                ]
            }
        )
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def actor_of(request: Request, task: Task | None = None) -> Actor:
    """The audit actor of an API request: ``operator`` when the user acts with operator rights
    on the task, else ``user`` (dashboard / API)."""
    user = request.user
    is_operator = task is not None and bool(access.can(user, Action.FORCE_CANCEL, task))
    return Actor.for_user(user, kind="operator" if is_operator else "user")


def caller_tenant(request: Request, slug: str | None) -> Tenant:
    """The tenant a request names (404 unless the caller may see it), else the caller's own:
    the bearer token's tenant, or the only tenant a session user belongs to."""
    user = request.user
    if slug:
        tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is None or not access.may_see_tenant(user, tenant.pk):
            raise NotFound(f"Tenant {slug!r} not found.")
        return tenant
    if isinstance(request.auth, Principal):
        return request.auth.tenant
    tenant_ids = list(access.roles_by_tenant(user))
    if len(tenant_ids) == 1:
        return Tenant.objects.get(pk=tenant_ids[0])
    raise ValidationError(
        {
            "tenant": [
                "Name the tenant: the caller belongs to "
                f"{'several tenants' if tenant_ids else 'no tenant'}."
            ]
        }
    )


# ---------------------------------------------------------------- tasks
def visible_task(request: Request, task_id: str) -> Task:
    task = queries.get_task(request.user, task_id)
    if task is None:
        raise NotFound("Task not found.")
    return task


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

    Finds the task (404 unless the caller sees it) and the object the action targets (the task,
    one of its input requests or effects: 404 if it has none such), authorizes that (403 with
    access's reason), parses the body (422), acts (409 when lifecycle refuses the move), and
    answers the task's detail as it now is. A subclass names its ``access_action`` and
    ``input_serializer`` and writes :meth:`act` (and :meth:`target`, if not the task).
    """

    input_serializer: type[Serializer]

    def target(self, task: Task, **kwargs: str) -> Any:
        return task

    def act(self, request: Request, task: Task, target: Any, data: dict[str, Any]) -> None:
        raise NotImplementedError

    def post(self, request: Request, task_id: str, **kwargs: str) -> Response:
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
                raise Conflict(_sentence(str(exc))) from None
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
            raise ValidationError({"user": [_sentence(decision.reason)]})
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


class TokenIssueView(ApiView):
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
        data = parse(TokenIssueSerializer, request)
        tenant = caller_tenant(request, data.get("tenant"))
        self.check_object_permissions(request, TokenIssue(tenant_id=tenant.pk, owner=request.user))
        token, secret = tokens.issue_token(
            user=request.user,
            tenant=tenant,
            issued_by=request.user,
            actor=actor_of(request),
            name=data["name"],
            scopes=data["scopes"],
            expires_at=data["expires_at"],
        )
        token = ApiToken.objects.select_related("tenant", "user").get(pk=token.pk)
        body = {**TokenSerializer(token).data, "secret": secret}
        return Response(body, status=status.HTTP_201_CREATED, headers={"Cache-Control": "no-store"})


class TokenRevokeView(ApiView):
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
        self.check_object_permissions(request, token)
        data = parse(TokenRevokeSerializer, request)
        token = tokens.revoke_token(
            token_id=token.pk, actor=actor_of(request), reason=data["reason"]
        )
        return Response(TokenSerializer(token).data)
