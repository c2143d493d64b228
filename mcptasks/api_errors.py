"""RFC 9457 ``application/problem+json`` errors for the REST API."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from rest_framework import exceptions
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import exception_handler

from mcptasks import limits, metrics

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
