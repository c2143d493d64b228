"""The time zone preference in headless Chromium: chosen from the user menu, kept on the server,
it wins over the browser's zone on every list and page (the page's script leaves the times
alone), and "Browser's time zone" gives the browser its say back."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

STAGING = {"service": "checkout", "version": "1.4.0", "environment": "staging"}
SAO_PAULO = timezone(timedelta(hours=-3))
TOKYO = timezone(timedelta(hours=9))


def shown_in(page: Any, where: str, zone: timezone, offset: str) -> None:
    """The first ``<time>`` at ``where`` reads its moment in ``zone`` ("… -03:00")."""
    moment = page.locator(where).first
    created = datetime.fromisoformat(moment.get_attribute("datetime")).astimezone(zone)
    expect(moment.locator(".abs")).to_have_text(f"{created:%Y-%m-%d %H:%M} {offset}")


def test_a_time_zone_chosen_from_the_user_menu_is_used_on_every_page_over_the_browsers(
    sign_in, mcp_as, backend, shoot
):
    from tests.browser.conftest import axe_violations

    task_id = mcp_as("alice").start("deploy_service", STAGING)
    assert backend.run_task(task_id) == "completed"
    olga = sign_in("olga", timezone_id="Asia/Tokyo")
    page = olga.page
    page.goto("/tasks/")
    page.locator("header .whoami").click()
    expect(page.locator("h1")).to_have_text("Preferences")
    select = page.get_by_label("Time zone")
    expect(select).to_have_value("")  # the browser's, until chosen
    assert axe_violations(page) == []
    select.select_option("America/Sao_Paulo")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".messages")).to_contain_text("America/Sao_Paulo")
    expect(page.get_by_label("Time zone")).to_have_value("America/Sao_Paulo")
    shoot(page, "preferences")

    for path, where in (
        ("/tasks/", f'[id="row-{task_id}"] time'),
        (f"/tasks/{task_id}/", "#sec-timeline time"),
        ("/audit/", "#audit-results tbody time"),
    ):
        response = page.goto(path)
        assert "-03:00" in response.text() and "+09:00" not in response.text()
        shown_in(page, where, SAO_PAULO, "-03:00")  # the script did not rewrite it to Tokyo's
    page.goto("/audit/tenant:acme/1/")
    expect(page.locator("dl.facts time .abs")).to_have_text(
        re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d -03:00$")
    )

    # Another browser of the same user, in yet another zone: the setting follows the user.
    elsewhere = sign_in("olga", timezone_id="Europe/Berlin")
    elsewhere.page.goto("/tasks/")
    shown_in(elsewhere.page, f'[id="row-{task_id}"] time', SAO_PAULO, "-03:00")

    # Back to the browser's zone: Tokyo again.
    page.goto("/preferences/")
    page.get_by_label("Time zone").select_option("")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".messages")).to_contain_text("follow your browser")
    page.goto("/tasks/")
    shown_in(page, f'[id="row-{task_id}"] time', TOKYO, "+09:00")
    assert not olga.console_errors, olga.console_errors
