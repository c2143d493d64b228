"""One redaction policy at every sink, in-process (the live whole-product check is
test_secret_corpus.py): the one wire serializer shows a task raw to its owner and redacted to
everyone else (REST, MCP, listen frames), the dashboard and its WebSocket show it redacted, and
access-log lines lose query-string secrets."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from django.test import Client

from mcptasks import lifecycle
from mcptasks.logging import AccessLog, QueryStringSecrets, redact_request_target
from mcptasks.models import Task, TaskState
from mcptasks.wire import detailed_for
from tests.api.conftest import api, api_tokens, ok, plain_http  # noqa: F401 - fixtures
from tests.core.conftest import actors, task_in  # noqa: F401 - fixtures

S = TaskState
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
PASSWORD = "Tr0ub4dor&3xyz!"
AKIA = "AKIAIOSFODNN7EXAMPLE"
PROSE = f"deploy billing-{AKIA} with aws_secret_access_key={AWS_SECRET} <password={PASSWORD}>"
SECRETS = (AWS_SECRET, PASSWORD, AKIA)


def assert_clean(text: str, where: str) -> None:
    found = [secret for secret in SECRETS if secret in text]
    assert not found, f"{where} shows {found}"


def holds_all(text: str) -> bool:
    return all(secret in text for secret in SECRETS)


@pytest.fixture
def asking(task_in: Any) -> Task:  # noqa: F811 - the fixture imported above
    """Alice's task waiting on a question anyone may answer, quoting the secrets."""
    task = task_in(
        S.AWAITING_INPUT,
        requests=[
            lifecycle.InputSpec(
                key="confirm",
                method="elicitation/create",
                params={
                    "mode": "form",
                    "message": f"Go ahead? {PROSE}",
                    "requestedSchema": {
                        "type": "object",
                        "properties": {"note": {"type": "string", "description": PROSE}},
                    },
                },
                audience="any",
            )
        ],
    )
    Task.objects.filter(pk=task.pk).update(status_message=f"checking {PROSE}")
    return Task.objects.get(pk=task.pk)


@pytest.fixture
def finished(make_task: Any) -> Task:
    task = make_task("alice")
    Task.objects.filter(pk=task.pk).update(
        state=S.COMPLETED,
        status_message=f"done with {PROSE}",
        result={"content": [{"type": "text", "text": PROSE}], "structuredContent": {"p": PROSE}},
    )
    return Task.objects.get(pk=task.pk)


@pytest.mark.django_db
def test_the_wire_task_is_raw_for_its_owner_and_redacted_for_every_other_viewer(
    finished: Task, asking: Task, users: dict[str, Any]
) -> None:
    for task in (finished, asking):
        assert holds_all(json.dumps(detailed_for(users["alice"], task)))
        for viewer in ("olga", "carl"):
            shown = json.dumps(detailed_for(users[viewer], task))
            assert_clean(shown, f"{viewer}'s tasks/get")
            assert "[REDACTED]" in shown
    olga_sees = detailed_for(users["olga"], asking)
    assert olga_sees["status"] == "input_required"  # she may answer: the question, redacted
    assert "Go ahead?" in olga_sees["inputRequests"]["confirm"]["params"]["message"]


@pytest.mark.django_db
def test_rest_detail_shows_non_owners_the_redacted_task_and_everyone_redacted_params(
    api: Any,  # noqa: F811 - the fixture imported above
    finished: Task,
    asking: Task,
) -> None:
    owner = ok(api("alice").get(f"/api/v1/tasks/{finished.pk}"))
    assert holds_all(json.dumps(owner["task"]))
    for viewer in ("carl", "olga"):
        for task in (finished, asking):
            detail = ok(api(viewer).get(f"/api/v1/tasks/{task.pk}"))
            assert_clean(json.dumps(detail), f"REST detail as {viewer}")
        listing = api(viewer).get("/api/v1/tasks")
        assert_clean(listing.content.decode(), f"REST list as {viewer}")
    (request,) = ok(api("carl").get(f"/api/v1/tasks/{asking.pk}"))["input_requests"]
    assert request["params"]["message"].startswith("Go ahead? deploy billing-[REDACTED]")


@pytest.mark.django_db
def test_dashboard_pages_and_socket_updates_show_questions_and_messages_redacted(
    asking: Task, finished: Task, users: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dashboard import consumers
    from dashboard.consumers import _update_for

    # The consumer's own connection hygiene would close the test's database connection.
    monkeypatch.setattr(consumers, "close_old_connections", lambda: None)

    for viewer in ("olga", "carl", "alice"):
        client = Client()
        client.force_login(users[viewer])
        for path in (
            "/inbox/",
            "/tasks/",
            f"/tasks/{asking.pk}/",
            f"/tasks/{asking.pk}/inputs/confirm/",
            f"/tasks/{finished.pk}/",
            f"/tasks/{finished.pk}/row",
        ):
            response = client.get(path)
            assert response.status_code in (200, 403), (path, response.status_code)
            assert_clean(response.content.decode(), f"{path} as {viewer}")
        update = _update_for(users[viewer], asking.pk)
        assert update is not None and update["status_message"].startswith("checking deploy")
        assert_clean(json.dumps(update), f"WebSocket update for {viewer}")


@pytest.mark.parametrize(
    "target, kept",
    [
        ("/mcp?access_token=mcpt_0123456789ab_Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA&x=1", "x=1"),
        ("/api/v1/tasks?cursor=abc&api%5Fkey=hunter2hunter2", "cursor=abc"),
        ("/cb?code=1&sig=deadbeefdeadbeef&client_secret=s3cr3t-value", "code=1"),
        ("/x?q=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlc2lnbmF0dXJl", "/x?q="),
    ],
)
def test_access_log_lines_lose_query_string_secrets(target: str, kept: str) -> None:
    cleaned = redact_request_target(target)
    assert kept in cleaned and "[REDACTED]" in cleaned
    for secret in ("Zm9vYmFy", "hunter2", "deadbeef", "s3cr3t", "c2lnbmF0"):
        assert secret not in cleaned


def test_the_access_log_writes_through_the_structured_logger_redacted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="mcptasks.access"):
        AccessLog()(
            "http",
            "complete",
            {
                "path": "/mcp?access_token=abcdefghijklmnop1234",
                "status": 401,
                "method": "POST",
                "client": "10.0.0.1:5555",
                "time_taken": 0.002,
                "size": 10,
            },
        )
    (record,) = caplog.records
    assert record.getMessage() == "POST /mcp?access_token=[REDACTED] 401"
    assert "abcdefghijklmnop1234" not in caplog.text


@pytest.mark.django_db
def test_the_django_admin_shows_task_fields_and_questions_redacted(
    asking: Task, finished: Task, django_user_model: Any
) -> None:
    admin_user = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(admin_user)
    request = asking.input_requests.get()
    for path in (
        f"/admin/mcptasks/task/{finished.pk}/change/",
        f"/admin/mcptasks/task/{asking.pk}/change/",
        f"/admin/mcptasks/inputrequest/{request.pk}/change/",
        "/admin/mcptasks/task/",
    ):
        response = client.get(path)
        assert response.status_code == 200, path
        page = response.content.decode()
        assert_clean(page, path)
        if "change" in path:
            assert "(redacted)" in page and "[REDACTED]" in page


@pytest.fixture
def asgi_loaded() -> None:
    """The ASGI module imported, as a server does (in setup: Django's logging set-up it
    triggers would otherwise drop the test's log capture)."""
    import mcptasks.asgi  # noqa: F401


def test_uvicorns_access_log_loses_query_string_secrets_too(
    asgi_loaded: None, caplog: pytest.LogCaptureFixture
) -> None:
    access = logging.getLogger("uvicorn.access")
    assert any(isinstance(f, QueryStringSecrets) for f in access.filters)
    with caplog.at_level(logging.INFO, logger="uvicorn.access"):
        # The call uvicorn's HTTP protocols make for each response.
        access.info(
            '%s - "%s %s HTTP/%s" %d',
            "10.0.0.1:5555",
            "GET",
            "/mcp?access_token=abcdefghijklmnop1234&page=2",
            "1.1",
            401,
        )
    (record,) = caplog.records
    assert record.getMessage() == (
        '10.0.0.1:5555 - "GET /mcp?access_token=[REDACTED]&page=2 HTTP/1.1" 401'
    )
