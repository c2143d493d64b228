"""Fixtures of the REST API tests: an authenticated API client per cast member, tasks in any
state (the core tests' driver), and the demo deploy tool paused at its approval."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from rest_framework.test import APIClient

from mcptasks.models import ApiToken, Task
from tests.api import toolpack as api_toolpack
from tests.core import conftest as core_fixtures

# The core tests' lifecycle driver: task_in(state, owner=...) and the cast's actors.
actors = core_fixtures.actors
task_in = core_fixtures.task_in

API_PACK = api_toolpack.__name__
PROBLEM = "application/problem+json"


@pytest.fixture(autouse=True)
def plain_http(settings: Any) -> None:
    """Requests of these tests come over plain HTTP: with DATABASE_URL set the settings are the
    production ones, whose HTTPS redirect would answer every request with a 301."""
    settings.SECURE_SSL_REDIRECT = False


@dataclass
class Api:
    """A DRF test client that speaks for one cast member with an ``api``-scoped token."""

    client: APIClient
    name: str

    def get(self, path: str, **params: Any) -> Any:
        return self.client.get(path, params)

    def post(self, path: str, body: Any = None) -> Any:
        return self.client.post(path, {} if body is None else body, format="json")


@pytest.fixture
def api_tokens(cast: dict[str, dict[str, Any]]) -> dict[str, str]:
    """One ``api``-scoped bearer token per cast member, in the member's first tenant."""
    return {
        name: ApiToken.issue(
            user=entry["user"], tenant=entry["tenant"], name=f"{name} api", scopes=["api"]
        )[1]
        for name, entry in cast.items()
    }


@pytest.fixture
def api(api_tokens: dict[str, str]) -> Callable[[str], Api]:
    def for_member(name: str) -> Api:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_tokens[name]}")
        return Api(client=client, name=name)

    return for_member


@pytest.fixture
def api_pack(settings: Any) -> str:
    """Enable the tools of tests/api/toolpack.py for this test."""
    settings.MCPTASKS_TOOL_PACKS = [*settings.MCPTASKS_TOOL_PACKS, API_PACK]
    return API_PACK


@pytest.fixture
def fake_cloud(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The demo pack's fake cloud, counting calls in a file of this test's own."""
    from mcptasks.tools.fakes import fake_cloud as cloud

    monkeypatch.setenv("MCPTASKS_FAKE_CLOUD", str(tmp_path / "fake_cloud.json"))
    yield cloud


@pytest.fixture
def paused_deploy(make_task: Callable[..., Task], fake_cloud: Any) -> Callable[..., Task]:
    """``paused_deploy(owner)``: a demo ``deploy_service`` to production, run by the runner up
    to its approval gate (an operator request that forbids self-approval)."""
    from mcptasks.runner import run_task

    def make(owner: str = "alice") -> Task:
        task = make_task(
            owner=owner,
            tool_name="deploy_service",
            arguments={"service": "billing", "version": "1.2.3", "environment": "production"},
        )
        assert run_task(task.pk) == "awaiting_operator"
        return Task.objects.get(pk=task.pk)

    return make


def all_pages(client: Any, path: str, **params: Any) -> list[dict[str, Any]]:
    """Every row of a cursor-paginated list, following ``next`` links."""
    rows: list[dict[str, Any]] = []
    page = ok(client.get(path, **params))
    while True:
        rows += page["results"]
        if not page["next"]:
            return rows
        page = ok(client.client.get(page["next"]))


def problem(response: Any, status: int) -> dict[str, Any]:
    """Assert an RFC 9457 problem with ``status``; return its body."""
    assert response.status_code == status, (response.status_code, _body(response))
    assert response["Content-Type"].startswith(PROBLEM), response["Content-Type"]
    body = response.json()
    assert body["status"] == status and body["title"] and body["detail"], body
    return body  # type: ignore[no-any-return]


def ok(response: Any, status: int = 200) -> Any:
    assert response.status_code == status, (response.status_code, _body(response))
    return response.json()


def _body(response: Any) -> Any:
    try:
        return response.json()
    except Exception:
        return getattr(response, "content", b"")[:500]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """How many requests schemathesis generated, and what they got (tests/api/test_schema.py)."""
    from tests.api.test_schema import TALLY

    if not TALLY:
        return
    by_status: dict[str, int] = {}
    by_mode: dict[str, int] = {}
    for line, count in TALLY.items():
        mode, status = line.split(" ", 1)[0], line.rsplit(" ", 1)[-1]
        by_status[status] = by_status.get(status, 0) + count
        by_mode[mode] = by_mode.get(mode, 0) + count
    terminalreporter.write_sep("-", "schemathesis")
    terminalreporter.write_line(
        f"{sum(TALLY.values())} generated requests ({', '.join(f'{n} {m}' for m, n in sorted(by_mode.items()))}); "
        f"{len({line.split(' -> ')[0] for line in TALLY})} operation×mode pairs; statuses: "
        + ", ".join(f"{status}: {count}" for status, count in sorted(by_status.items()))
    )
