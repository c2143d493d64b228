"""Every unknown path and method under /api/ answers a JSON problem, whoever asks and however:
never Django's HTML 404 or its "form expired" CSRF page."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.api.conftest import problem

pytestmark = pytest.mark.django_db

UNKNOWN = [
    "/api/v1/tokens/",  # the wrong path docs/operations.md once gave
    "/api/v1/nothing",
    "/api/v2/tasks",
    "/api/",
    "/api/v1/tasks/abc/unknown-action",
    "/api/v1/audit/exports/x/y/z",
]
METHODS = ["get", "post", "put", "patch", "delete", "options"]


@pytest.mark.parametrize("path", UNKNOWN)
@pytest.mark.parametrize("method", METHODS)
def test_an_unknown_api_path_is_a_json_404_for_every_method(
    cast: Any, path: str, method: str
) -> None:
    # A browser session with CSRF enforced: the case that used to get the HTML CSRF page.
    session = Client(enforce_csrf_checks=True)
    session.force_login(cast["alice"]["user"])
    anonymous = Client(enforce_csrf_checks=True)
    bearer = Client(HTTP_AUTHORIZATION=f"Bearer {cast['alice']['token']}")
    for client in (session, anonymous, bearer):
        response = client.generic(method.upper(), path, "{}", content_type="application/json")
        body = problem(response, 404)
        assert body["detail"] == "No such API endpoint."


@pytest.mark.parametrize("method", ["put", "patch", "delete"])
def test_a_wrong_method_on_a_known_path_is_a_json_405(api: Any, method: str) -> None:
    for path in ("/api/v1/tokens/issue", "/api/v1/tasks", "/api/schema/", "/api/docs/"):
        response = getattr(api("alice").client, method)(path, {}, format="json")
        problem(response, 405)


def test_an_unsafe_session_request_without_csrf_is_a_json_403(cast: Any) -> None:
    session = Client(enforce_csrf_checks=True)
    session.force_login(cast["alice"]["user"])
    response = session.post("/api/v1/tokens/issue", data="{}", content_type="application/json")
    body = problem(response, 403)
    assert "CSRF" in body["detail"]
