"""The dashboard for a day's work, in headless Chromium: history and caching of filtered views,
search, sorting and bulk actions, readable times, tenant-scoped audit addresses, one tenant
scope everywhere, accessibility (axe-core) and the phone layout. Screenshots go to screenshots/
(git-ignored)."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

STAGING = {"service": "checkout", "version": "1.4.0", "environment": "staging"}


def assert_whole_page(page: Any, heading: str) -> None:
    """The page is a whole, styled document (navigation, stylesheet), not a bare fragment."""
    expect(page.locator("header.topbar")).to_be_visible()
    expect(page.locator("h1")).to_have_text(heading)
    assert page.evaluate("document.styleSheets.length") >= 1
    assert page.evaluate("getComputedStyle(document.body).margin") == "0px"


def test_back_forward_and_reload_after_filtering_show_whole_pages(sign_in, mcp_as, backend):
    task_id = mcp_as("alice").start("deploy_service", STAGING)
    assert backend.run_task(task_id) == "completed"
    olga = sign_in("olga")
    for path, heading, field, value, results in (
        ("/tasks/", "Tasks", "#id_state", "completed", "#task-results"),
        ("/audit/", "Audit trail", "#id_action", "task.completed", "#audit-results"),
    ):
        page = olga.open(path)
        page.evaluate("window.__sameDocument = true")
        if field == "#id_state":
            page.locator(field).select_option(value)
        else:
            page.locator(field).fill(value)
            page.locator(field).press("Enter")
        page.wait_for_url(f"**{path}?*{value}*")
        assert page.evaluate("window.__sameDocument") is True  # filtered in place (htmx)
        filtered = page.url
        expect(page.locator(results)).to_contain_text(
            "deploy_service" if path == "/tasks/" else value
        )
        page.locator(f"{results} tbody a").first.click()
        page.wait_for_load_state()
        assert page.url != filtered

        page.go_back()
        assert page.url == filtered
        assert_whole_page(page, heading)
        expect(page.locator(field)).to_have_value(value)
        page.reload()
        assert_whole_page(page, heading)
        expect(page.locator(field)).to_have_value(value)
        page.go_forward()
        expect(page.locator("header.topbar")).to_be_visible()
        page.go_back()
        assert_whole_page(page, heading)

        # What the server says about caching: fragments and pages vary on HX-Request.
        fragment = page.request.get(
            filtered, headers={"HX-Request": "true", "HX-Target": results[1:]}
        )
        whole = page.request.get(filtered)
        assert "<header" not in fragment.text() and "<header" in whole.text()
        for response in (fragment, whole):
            assert "hx-request" in response.headers["vary"].lower()
            assert "private" in response.headers["cache-control"]
        assert "no-store" in fragment.headers["cache-control"]
        page.close()
    assert not olga.console_errors, olga.console_errors
