"""The Destinations page in headless Chromium (issue 24): a tenant admin creates a webhook
destination through the form — the secret is a password field and never comes back into any
page — and a member is refused."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SECRET = "whsec_" + "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTAx"


def test_an_admin_creates_a_webhook_destination_and_never_sees_its_secret(sign_in, backend):
    amy = sign_in("amy")
    page = amy.page
    assert page.goto("/destinations/").status == 200
    expect(page.locator("h1")).to_have_text("Destinations")
    assert page.locator("#id_secret").get_attribute("type") == "password"
    page.fill("#id_name", "ci hooks")
    page.fill("#id_config", '{"url": "http://127.0.0.1:9/hook"}')
    page.fill("#id_secret", SECRET)
    page.check("input[name=events][value='task.completed']")
    page.check("input[name=events][value='audit']")
    page.click("form[data-destination-form] button[type=submit]")
    page.wait_for_url("**/destinations/*/")
    expect(page.locator("h1")).to_contain_text("ci hooks")
    expect(page.locator(".page-head")).to_contain_text("secret set")
    assert SECRET not in page.content()
    assert page.locator("#id_secret").input_value() == ""
    page.goto("/destinations/")
    expect(page.locator("tr[data-destination]")).to_have_count(1)
    assert SECRET not in page.content()
    assert amy.csp_violations() == []

    def stored() -> tuple[str, list[str]]:
        from mcptasks.models import Destination

        row = Destination.objects.get()
        return row.name, row.events

    assert backend(stored) == ("ci hooks", ["task.completed", "audit"])

    alice = sign_in("alice")
    assert alice.page.goto("/destinations/").status == 403
    expect(alice.page.locator("nav.mainnav")).not_to_contain_text("Destinations")
