"""The base of every REST view (mcptasks.api, audit.api): authentication, the one permission
class, bounded JSON in, JSON out, problem errors, transient database errors retried, and the
steps views repeat (parse a body, name a tenant, the audit actor, an access decision)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import generics
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import NotFound, ParseError, PermissionDenied, ValidationError
from rest_framework.parsers import JSONParser
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import Serializer
from rest_framework.views import APIView

from audit.record import Actor
from mcptasks import access, db_retry, inputs
from mcptasks.access import Action
from mcptasks.auth import Principal
from mcptasks.models import Task, Tenant
from mcptasks.restkit.auth import BearerTokenAuthentication
from mcptasks.restkit.errors import (
    DatabaseUnavailable,
    Unprocessable,
    problem_handler,
    problems,
    sentence,
)
from mcptasks.restkit.permissions import AccessPermission

log = logging.getLogger(__name__)


class BearerTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """Documents ``Authorization: Bearer mcpt_…`` (an API token with the ``api`` scope)."""

    target_class = "mcptasks.restkit.auth.BearerTokenAuthentication"
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


# An admin view of a tenant's settings (approval policies, reviewer groups, destinations,
# tokens): the steps each repeats (parse the body, name the tenant, ask access) with a refusal
# as a 403 carrying access's reason. (A comment, not a docstring: drf-spectacular would show a
# docstring as the description of every operation that has none of its own.)
class TenantAdminView(ApiView):
    def body[S: Serializer](self, serializer_class: type[S]) -> dict[str, Any]:
        """The request body, validated (422 naming the field)."""
        return parse(serializer_class, self.request)

    def tenant(self, slug: str | None, may: Callable[[Any, int], access.Decision]) -> Tenant:
        """The tenant ``slug`` names (404 unless the caller sees it; else the caller's own),
        if ``may(user, tenant_id)`` allows it (else 403)."""
        tenant = caller_tenant(self.request, slug)
        self.require(may(self.request.user, tenant.pk))
        return tenant

    def require(self, decision: access.Decision) -> None:
        """Go on only if access allowed it: else a 403 with its reason, as a sentence."""
        if not decision:
            raise PermissionDenied(sentence(decision.reason))

    @property
    def actor(self) -> Actor:
        """The audit actor of this request (``user``)."""
        return actor_of(self.request)


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
    """The audit actor of an API request: the one rule of every channel (``access.actor``)."""
    return access.actor(request.user, "rest", task)


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
