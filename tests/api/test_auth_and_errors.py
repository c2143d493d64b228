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


# ---------------------------------------------------------------- no 500 from client input
# Each of these answered 500 (or, for a fullwidth digit, revoked token 5) before the ids, cursors
# and bodies were checked where they are parsed (mcptasks/inputs.py).
@pytest.mark.parametrize("segment", ["%C2%B2", "%EF%BC%95", "%D9%A5", "5%00", "1" * 19, "-5", "+5"])
def test_token_and_effect_ids_are_ascii_digits_only(api: Any, task_in: Any, segment: str) -> None:
    olga = api("olga")
    active = ApiToken.objects.filter(revoked_at__isnull=True).count()
    problem(olga.client.post(f"/api/v1/tokens/{segment}/revoke", {}, format="json"), 404)
    assert ApiToken.objects.filter(revoked_at__isnull=True).count() == active
    task = task_in("needs_reconciliation")
    reconcile = f"{TASKS}/{task.pk}/effects/{segment}/reconcile"
    problem(olga.post(reconcile, {"decision": "fail", "reason": "x"}), 404)


def _drf_cursor(query: str) -> str:
    import base64

    return base64.b64encode(query.encode()).decode()


@pytest.mark.parametrize(
    "path",
    ["/api/v1/tasks", "/api/v1/tokens", "/api/v1/audit/events"],
)
@pytest.mark.parametrize(
    "position",
    [
        "2026",  # cD0yMDI2, the finding
        "not-a-time",
        "2026-01-01 00:00:00",  # no offset
        "2026-01-01 00:00:00+23:59",  # beyond PostgreSQL's offsets: converted to UTC first
        "0001-01-01 00:00:00+05:00",  # before year 1 in UTC
        "2026-01-01 00:00:00+00:00\x00",
        "%EF%BC%95",
        "\uff15",
        "99999999999999999999",
    ],
)
def test_cursors_the_api_did_not_issue_are_invalid_input(
    api: Any, make_task: Any, path: str, position: str
) -> None:
    make_task("alice")
    from urllib.parse import urlencode

    response = api("carl").get(path, cursor=_drf_cursor(urlencode({"p": position})))
    assert response.status_code in (200, 422), response.content
    if response.status_code == 422:
        body = problem(response, 422)
        assert "cursor" in body["errors"] and body["detail"].startswith("Cursor: Invalid cursor")


def test_a_cursor_of_the_api_still_pages(api: Any, make_task: Any) -> None:
    for _ in range(3):
        make_task("alice")
    alice = api("alice")
    first = ok(alice.get(TASKS, page_size=2))
    second = ok(alice.client.get(first["next"]))
    assert len(first["results"]) == 2 and len(second["results"]) == 1


@pytest.mark.parametrize("depth", [65, 990, 5000, 100_000])
@pytest.mark.parametrize("kind", ["[", "{"])
def test_deeply_nested_json_bodies_are_400(api: Any, make_task: Any, depth: int, kind: str) -> None:
    task = make_task("alice")
    deep = "[" * depth + "]" * depth if kind == "[" else '{"a":' * depth + "1" + "}" * depth
    alice = api("alice")
    for path, template in [
        ("/api/v1/tokens/issue", '{"name": %s}'),
        (f"{TASKS}/{task.pk}/cancel", '{"reason": %s}'),
        (f"{TASKS}/{task.pk}/cancel", "%s"),
    ]:
        body = problem(
            alice.client.post(path, template % deep, content_type="application/json"), 400
        )
        assert "nest" in body["detail"]
    task.refresh_from_db()
    assert task.cancel_requested_at is None


def test_nesting_within_the_limit_is_read(api: Any, make_task: Any) -> None:
    task = make_task("alice")
    nested: Any = "stop"
    for _ in range(63):
        nested = {"a": nested}
    # 64 levels (the reason's object and the body): parsed, then refused by the serializer.
    body = problem(api("alice").post(f"{TASKS}/{task.pk}/cancel", {"reason": nested}), 422)
    assert body["detail"].startswith("Reason")


def test_bearer_tokens_holding_a_nul_or_a_lone_surrogate_are_401(
    api_tokens: dict[str, str],
) -> None:
    """The lookup reached the database, which refuses NUL (a 500 on PostgreSQL)."""
    real = api_tokens["alice"]
    lookup = real.split("_")[1]
    for secret in ["mcpt_ab\x00c_def", f"mcpt_{lookup}\x00_x", f"{real}\x00", "mcpt_\udaf1_x"]:
        problem(bearer(secret).get(TASKS), 401)
    ok(bearer(real).get(TASKS))
