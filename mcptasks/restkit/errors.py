"""RFC 9457 ``application/problem+json`` errors of every REST view (mcptasks.api, audit.api):
the exception handler, the API's own HTTP errors, and their place in the OpenAPI schema."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions, serializers, status
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import exception_handler

from mcptasks import access, lifecycle, limits, metrics

PROBLEM = "application/problem+json"


def problem_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, limits.Throttled):  # the unknown-task-id budget (limits.py)
        metrics.THROTTLED.labels(kind=exc.kind).inc()
        exc = exceptions.Throttled(wait=exc.retry_after, detail=exc.message)
    response = exception_handler(exc, context)
    if response is None:
        return None
    detail = response.data
    title = str(getattr(exc, "default_detail", "Error"))
    if "{" in title:  # a template such as 'Method "{method}" not allowed.'
        title = HTTPStatus(response.status_code).phrase
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": str(title),
        "status": response.status_code,
    }
    if isinstance(detail, dict) and set(detail) == {"detail"}:
        body["detail"] = str(detail["detail"])
    else:
        body["detail"] = "Invalid input" if response.status_code in (400, 422) else str(title)
        body["errors"] = detail
    response.data = body
    response.content_type = PROBLEM
    request = context.get("request")
    if request is not None:
        # JSON whatever the view renders on success (the schema's YAML, the docs' HTML).
        request.accepted_renderer = JSONRenderer()
        request.accepted_media_type = PROBLEM
    return response


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "Conflict"
    default_code = "conflict"


class DatabaseUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The database is unavailable"
    default_code = "database_unavailable"


class Unprocessable(exceptions.APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_detail = "Invalid input"
    default_code = "invalid"


def sentence(text: str) -> str:
    """``text`` as a sentence: capitalised, ending with a full stop ("" stays "")."""
    text = text.strip()
    return (text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")) if text else text


def as_http_error(exc: Exception) -> Exception:
    """access's and lifecycle's refusals, and validation errors, as the API's HTTP errors."""
    if isinstance(exc, access.TaskHidden):
        return exceptions.NotFound("Task not found.")
    if isinstance(exc, access.Refused):
        return exceptions.PermissionDenied(sentence(exc.decision.reason) or None)
    if isinstance(exc, lifecycle.TaskNotFound):
        return exceptions.NotFound("Task not found.")
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
        return Conflict(sentence(str(exc)))
    if isinstance(exc, exceptions.ValidationError):
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
        response.data["detail"] = sentence(_first_error(response.data["errors"]))
    return response


# ---------------------------------------------------------------- in the OpenAPI schema
class ProblemSerializer(serializers.Serializer):
    """``application/problem+json``: every error of the API."""

    type = serializers.CharField(help_text="A URI naming the problem type (about:blank).")
    title = serializers.CharField(help_text="The HTTP status phrase or a short summary.")
    status = serializers.IntegerField(help_text="The HTTP status code.")
    detail = serializers.CharField(help_text="What went wrong, specifically.")
    errors = serializers.JSONField(  # type: ignore[assignment]  # a field, not Serializer.errors
        required=False, help_text="Per-field validation messages (422 only)."
    )


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
