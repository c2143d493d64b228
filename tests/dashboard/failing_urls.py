"""The product's URLconf and its error handlers, plus one view that fails (for the 500 page)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path

from mcptasks.urls import handler404, handler500, urlpatterns

__all__ = ["handler404", "handler500", "urlpatterns"]


def fail(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a bug")


urlpatterns = [path("api/v1/fail", fail), path("fail", fail), *urlpatterns]
