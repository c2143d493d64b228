"""One viewer-aware status on every channel (wire.viewer_status): a task awaiting a client's
answer is ``input_required`` only to a viewer who may give it — its owner — and ``working`` to
everyone else who may see it (an operator here), on MCP tasks/get, REST GET, the dashboard's
list row and task page, and the dashboard's live update."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from dashboard.consumers import _update_for
from mcptasks import wire
from mcptasks.models import Task, TaskState
from tests.api.conftest import api, api_tokens, ok  # noqa: F401 - fixtures
from tests.core.conftest import actors, task_in  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db(transaction=True)

# alice owns the task and is the client it asks (key "q"); olga operates its tenant and may see
# it, but a client-audience request is the requesting client's alone to answer.
EXPECTED = {"alice": "input_required", "olga": "working"}


@pytest.fixture
def asking(task_in: Any) -> Task:  # noqa: F811
    task: Task = task_in(TaskState.AWAITING_INPUT, owner="alice")
    return task


def _signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("viewer", sorted(EXPECTED))
def test_mcp_tasks_get_says_input_required_only_to_who_may_answer(
    viewer: str, asking: Task, mcp_for: Any
) -> None:
    reply = mcp_for(viewer).call("tasks/get", {"taskId": asking.pk})
    assert "result" in reply.body, reply.body
    result = reply.body["result"]
    assert result["status"] == EXPECTED[viewer]
    assert ("inputRequests" in result) is (viewer == "alice")


@pytest.mark.parametrize("viewer", sorted(EXPECTED))
def test_rest_detail_carries_the_viewers_status(viewer: str, asking: Task, api: Any) -> None:  # noqa: F811
    detail = ok(api(viewer).get(f"/api/v1/tasks/{asking.pk}"))
    assert detail["task"]["status"] == EXPECTED[viewer]


@pytest.mark.parametrize("viewer", sorted(EXPECTED))
def test_rest_list_and_detail_status_fields_are_the_viewers(
    viewer: str,
    asking: Task,
    api: Any,  # noqa: F811
) -> None:
    """The REST task summary's ``status`` (list rows and the detail's own field) is the viewer's
    too, not the raw wire mapping of the state."""
    rows = ok(api(viewer).get("/api/v1/tasks"))["results"]
    assert {row["id"]: row["status"] for row in rows}[asking.pk] == EXPECTED[viewer]
    detail = ok(api(viewer).get(f"/api/v1/tasks/{asking.pk}"))
    assert detail["status"] == EXPECTED[viewer]
    assert detail["state"] == TaskState.AWAITING_INPUT


@pytest.mark.parametrize("viewer", sorted(EXPECTED))
def test_dashboard_task_page_shows_the_viewers_mcp_status(
    viewer: str, asking: Task, users: dict[str, Any]
) -> None:
    client = _signed_in(users[viewer])
    for params in ({}, {"fragment": "live"}):
        html = client.get(reverse("dashboard:task", args=[asking.pk]), params).content.decode()
        assert f'<strong data-status="{EXPECTED[viewer]}">' in html
        assert re.search(rf'data-state="awaiting_input" data-status="{EXPECTED[viewer]}"', html)
        if viewer == "olga":
            assert 'MCP status <strong data-status="working">working</strong>' in html


@pytest.mark.parametrize("viewer", sorted(EXPECTED))
def test_dashboard_list_row_carries_the_viewers_status(
    viewer: str, asking: Task, users: dict[str, Any]
) -> None:
    client = _signed_in(users[viewer])
    listed = client.get(reverse("dashboard:tasks")).content.decode()
    row = client.get(reverse("dashboard:task_row", args=[asking.pk])).content.decode()
    for html in (listed, row):
        badge = re.search(rf'id="row-{asking.pk}".*?data-status="([a-z_]+)"', html, re.S)
        assert badge is not None and badge.group(1) == EXPECTED[viewer]
    tone = "warn" if viewer == "alice" else "info"
    assert f'class="badge tone-{tone}" data-state="awaiting_input"' in row


@pytest.mark.parametrize("viewer", sorted(EXPECTED))
def test_dashboard_live_update_carries_the_viewers_status(
    viewer: str, asking: Task, users: dict[str, Any]
) -> None:
    update = _update_for(users[viewer], asking.pk)
    assert update is not None and update["status"] == EXPECTED[viewer]


def test_every_channel_agrees_with_tasks_get(
    asking: Task, users: dict[str, Any], mcp_for: Any
) -> None:
    """The page form (viewer_statuses) and the one-task form give what tasks/get gives."""
    for viewer, expected in EXPECTED.items():
        user = users[viewer]
        assert wire.viewer_status(user, asking) == expected
        assert wire.viewer_statuses(user, [asking])[asking.pk] == expected
        assert wire.detailed_for(user, asking)["status"] == expected
