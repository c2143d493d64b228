"""Authentication (bearer tokens with the ``api`` scope, sessions with CSRF) and the problem
format of errors."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from mcptasks.models import ApiToken
from tests.api.conftest import ok, problem

pytestmark = pytest.mark.django_db
TASKS = "/api/v1/tasks"


def bearer(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def test_no_credentials_is_401_with_a_bearer_challenge(db: Any) -> None:
    response = APIClient().get(TASKS)
    problem(response, 401)
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("secret", ["nonsense", "mcpt_abc_def", "mcpt__"])
def test_bad_tokens_are_401(db: Any, secret: str) -> None:
    problem(bearer(secret).get(TASKS), 401)


def test_revoked_and_expired_tokens_are_401(api_tokens: dict[str, str]) -> None:
    ApiToken.objects.filter(user__username="alice", scopes=["api"]).update(
        revoked_at=timezone.now())
    ApiToken.objects.filter(user__username="adam", scopes=["api"]).update(
        expires_at=timezone.now())
    problem(bearer(api_tokens["alice"]).get(TASKS), 401)
    problem(bearer(api_tokens["adam"]).get(TASKS), 401)


def test_a_token_without_the_api_scope_is_403(cast: dict[str, Any]) -> None:
    body = problem(bearer(cast["alice"]["token"]).get(TASKS), 403)  # the cast's `mcp` token
    assert "'api'" in body["detail"]


def test_a_session_works_and_unsafe_methods_need_csrf(cast: dict[str, Any],
                                                      make_task: Any) -> None:
    task = make_task("alice")
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(cast["alice"]["user"])
    assert ok(client.get(TASKS))["results"][0]["id"] == task.pk
    problem(client.post(f"{TASKS}/{task.pk}/cancel", {}, format="json"), 403)
    assert task.__class__.objects.get(pk=task.pk).cancel_requested_at is None
    secret = "k" * 32  # a CSRF secret as the cookie holds it; the header repeats it
    client.cookies["csrftoken"] = secret
    response = client.post(f"{TASKS}/{task.pk}/cancel", {}, format="json",
                           HTTP_X_CSRFTOKEN=secret)
    assert ok(response)["state"] == "cancelled"


def test_unknown_api_paths_are_problems(api: Any) -> None:
    problem(api("alice").get("/api/v1/nothing-here"), 404)
    problem(api("alice").get("/api/v2/tasks"), 404)


def test_malformed_json_is_400_and_a_non_object_body_422(api: Any, make_task: Any) -> None:
    task = make_task("alice")
    client = api("alice").client
    problem(client.post(f"{TASKS}/{task.pk}/cancel", "{not json",
                        content_type="application/json"), 400)
    body = problem(client.post(f"{TASKS}/{task.pk}/cancel", "[1, 2]",
                               content_type="application/json"), 422)
    assert "JSON object" in body["detail"]


def test_unsupported_media_type_is_415(api: Any, make_task: Any) -> None:
    task = make_task("alice")
    problem(api("alice").client.post(f"{TASKS}/{task.pk}/cancel", "reason=x",
                                     content_type="application/x-www-form-urlencoded"), 415)


def test_wrong_method_is_405(api: Any) -> None:
    problem(api("alice").client.delete(TASKS), 405)
