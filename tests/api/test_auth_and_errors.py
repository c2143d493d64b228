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
        revoked_at=timezone.now()
    )
    ApiToken.objects.filter(user__username="adam", scopes=["api"]).update(expires_at=timezone.now())
    problem(bearer(api_tokens["alice"]).get(TASKS), 401)
    problem(bearer(api_tokens["adam"]).get(TASKS), 401)


def test_a_token_without_the_api_scope_is_403(cast: dict[str, Any]) -> None:
    body = problem(bearer(cast["alice"]["token"]).get(TASKS), 403)  # the cast's `mcp` token
    assert "'api'" in body["detail"]


def test_a_session_works_and_unsafe_methods_need_csrf(cast: dict[str, Any], make_task: Any) -> None:
    task = make_task("alice")
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(cast["alice"]["user"])
    assert ok(client.get(TASKS))["results"][0]["id"] == task.pk
    problem(client.post(f"{TASKS}/{task.pk}/cancel", {}, format="json"), 403)
    assert task.__class__.objects.get(pk=task.pk).cancel_requested_at is None
    secret = "k" * 32  # a CSRF secret as the cookie holds it; the header repeats it
    client.cookies["csrftoken"] = secret
    response = client.post(f"{TASKS}/{task.pk}/cancel", {}, format="json", HTTP_X_CSRFTOKEN=secret)
    assert ok(response)["state"] == "cancelled"


def test_unknown_api_paths_are_problems(api: Any) -> None:
    problem(api("alice").get("/api/v1/nothing-here"), 404)
    problem(api("alice").get("/api/v2/tasks"), 404)


def test_malformed_json_is_400_and_a_non_object_body_422(api: Any, make_task: Any) -> None:
    task = make_task("alice")
    client = api("alice").client
    problem(
        client.post(f"{TASKS}/{task.pk}/cancel", "{not json", content_type="application/json"), 400
    )
    body = problem(
        client.post(f"{TASKS}/{task.pk}/cancel", "[1, 2]", content_type="application/json"), 422
    )
    assert "JSON object" in body["detail"]


def test_unsupported_media_type_is_415(api: Any, make_task: Any) -> None:
    task = make_task("alice")
    problem(
        api("alice").client.post(
            f"{TASKS}/{task.pk}/cancel",
            "reason=x",
            content_type="application/x-www-form-urlencoded",
        ),
        415,
    )


def test_wrong_method_is_405(api: Any) -> None:
    problem(api("alice").client.delete(TASKS), 405)


# Found by schemathesis on PostgreSQL: inputs Python accepts and the database does not.
def test_date_time_filters_with_any_offset_are_answered(api: Any, make_task: Any) -> None:
    make_task("alice")
    alice = api("alice")
    # +23:19 is valid ISO 8601 (Python), beyond PostgreSQL's ±15:59: converted to UTC first.
    assert ok(alice.get(TASKS, created_before="3044-01-08T19:37:29.1+23:19"))["results"]
    assert ok(alice.get("/api/v1/tokens"))  # and the connection is still usable
    problem(alice.get(TASKS, created_after="0001-01-01T00:00:00+05:00"), 422)  # before year 1
    problem(api("carl").get("/api/v1/audit/events", until="9999-12-31T23:59:59-05:00"), 422)


def test_nul_characters_never_reach_the_database(api: Any, task_in: Any) -> None:
    task = task_in("awaiting_operator")
    olga = api("olga")
    problem(olga.get(f"{TASKS}/{task.pk}%00"), 404)
    problem(olga.get(f"{TASKS}/a\x00b"), 404)
    problem(olga.get(TASKS, tool="echo\x00"), 422)
    problem(olga.post(f"{TASKS}/{task.pk}/force-cancel", {"reason": "a\x00b"}), 422)
    answer = f"{TASKS}/{task.pk}/input-requests/approve/answer"
    # JSON escapes of a NUL and of a lone surrogate: valid JSON, not storable text.
    for content in ('{"note": "a\\u0000b"}', '{"a\\u0000b": 1}', '{"note": "\\udaf1"}'):
        raw = f'{{"response": {{"action": "accept", "content": {content}}}}}'
        body = problem(olga.client.post(answer, raw, content_type="application/json"), 422)
        assert body["detail"].startswith("Response.content")
    assert ok(olga.get(f"{TASKS}/{task.pk}"))["input_requests"][0]["state"] == "pending"
