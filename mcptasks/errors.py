"""Error pages: the product's own 404 and 500, and problem JSON for every error under ``/api/``.

Django's handlers (``handler404``/``handler500`` in ``mcptasks.urls``) serve them outside debug.
With ``DEBUG`` on (the embedded default) Django would answer a 404 with its technical page, which
lists every URL pattern; :class:`NotFoundPagesMiddleware` answers with the product's page instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.template import loader
from django.urls import Resolver404, resolve
from django.views import defaults

API_PREFIX = "/api/"
PROBLEM = "application/problem+json"


def problem(status: int, title: str, detail: str) -> JsonResponse:
    """An RFC 9457 problem, the shape of every REST API error (``mcptasks.restkit.errors``)."""
    return JsonResponse(
        {"type": "about:blank", "title": title, "status": status, "detail": detail},
        status=status,
        content_type=PROBLEM,
    )


def api_not_found() -> JsonResponse:
    return problem(404, "Not Found", "No such API endpoint.")


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """``handler404``: problem JSON under /api/, else the product's ``404.html``."""
    if _is_api(request):
        return api_not_found()
    return defaults.page_not_found(request, exception or Http404())


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: problem JSON under /api/, else the product's ``500.html``.

    The template is rendered without a request context: whatever failed may fail again there.
    """
    if _is_api(request):
        return problem(500, "Internal Server Error", "The server failed; the error is logged.")
    return HttpResponse(loader.get_template("500.html").render(), status=500)


class NotFoundPagesMiddleware:
    """With ``DEBUG`` on, answer 404s with the product's page, not Django's pattern list.

    Unresolvable paths are answered before the view layer (Django raises their 404 outside any
    middleware's reach); a view's ``Http404`` is caught in ``process_exception``. Sits after
    ``CommonMiddleware``, whose slash redirect still applies to the 404 it sees.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if settings.DEBUG:
            try:
                resolve(request.path_info, getattr(request, "urlconf", None))
            except Resolver404:
                return page_not_found(request)
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> Any:
        if settings.DEBUG and isinstance(exception, Http404):
            return page_not_found(request, exception)
        return None
