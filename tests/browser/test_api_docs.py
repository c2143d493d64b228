"""The REST API's docs in a real browser: Swagger UI (/api/docs/) and ReDoc (/api/redoc/) load
only the project's own static files and render every operation of the schema, under the CSP,
with no violation and no console error."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
TIMEOUT = 20_000


def operations(live_url: str) -> list[tuple[str, str, str]]:
    """(method, path, summary) of every operation the schema lists."""
    import httpx

    schema = yaml.safe_load(httpx.get(f"{live_url}/api/schema/", timeout=10).text)
    return [
        (method.upper(), path, operation["summary"])
        for path, item in schema["paths"].items()
        for method, operation in item.items()
    ]


def requests_elsewhere(page: Any, live_url: str) -> list[str]:
    seen: list[str] = []
    page.on("request", lambda request: seen.append(request.url))
    return seen


def test_swagger_ui_renders_every_operation_from_our_own_files(
    sign_in: Any, live_url: str, shoot: Any
) -> None:
    expected = operations(live_url)
    session = sign_in("amy")
    page = session.new_page()
    requested = requests_elsewhere(page, live_url)
    page.goto("/api/docs/")
    blocks = page.locator(".opblock")
    expect(blocks).to_have_count(len(expected), timeout=TIMEOUT)
    shown = {
        (
            block.locator(".opblock-summary-method").inner_text(),
            block.locator(".opblock-summary-path").get_attribute("data-path"),
        )
        for block in blocks.all()
    }
    assert shown == {(method, path) for method, path, _ in expected}
    for _, _, summary in expected:
        expect(page.get_by_text(summary, exact=True).first).to_be_attached()
    shoot(page, "api-docs-swagger")
    assert session.csp_violations() == []
    assert session.console_errors == []
    assert [url for url in requested if not url.startswith(live_url)] == []


def test_redoc_renders_every_operation_from_our_own_files(
    sign_in: Any, live_url: str, shoot: Any
) -> None:
    expected = operations(live_url)
    session = sign_in("amy")
    page = session.new_page()
    requested = requests_elsewhere(page, live_url)
    page.goto("/api/redoc/")
    expect(page.locator("h1").first).to_contain_text("mcptasks REST API", timeout=TIMEOUT)
    for _, _, summary in expected:
        expect(page.locator("h2", has_text=summary).first).to_be_attached()
    shoot(page, "api-docs-redoc")
    assert session.csp_violations() == []
    assert session.console_errors == []
    assert [url for url in requested if not url.startswith(live_url)] == []
