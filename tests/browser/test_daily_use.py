"""The dashboard for a day's work, in headless Chromium: history and caching of filtered views,
search, sorting and bulk actions, readable times, tenant-scoped audit addresses, one tenant
scope everywhere, accessibility (axe-core) and the phone layout. Screenshots go to screenshots/
(git-ignored)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PRODUCTION = {"service": "checkout", "version": "1.4.0", "environment": "production"}
LIVE_TIMEOUT = 15_000
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
        # Back within the page (htmx restores the previous address from the server): whole.
        page.locator("#id_tenant").select_option("*" if path == "/audit/" else "")
        page.wait_for_url(lambda url: url != filtered)
        page.go_back()
        page.wait_for_url(filtered)
        assert_whole_page(page, heading)
        expect(page.locator(field)).to_have_value(value)
        expect(page.locator(f"{results} tbody a").first).to_be_visible()
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


def first_event(chain: str) -> tuple[int, int]:
    from audit.models import AuditEvent

    event = AuditEvent.objects.filter(chain=chain).order_by("seq").first()
    return event.pk, event.seq


def test_one_tenant_scope_everywhere_and_audit_addresses_name_their_chain(sign_in, mcp_as, backend):
    acme = mcp_as("alice").start("deploy_service", PRODUCTION)
    globex = mcp_as("bob").start("deploy_service", PRODUCTION)
    assert backend.run_task(acme) == backend.run_task(globex) == "awaiting_operator"
    olga = sign_in("olga")
    page = olga.page  # the inbox, in olga's first tenant
    expect(page.locator("#inbox-scope")).to_contain_text("Acme Corp")
    expect(page.locator(f'#inbox [data-task-id="{acme}"]')).to_be_visible()
    expect(page.locator(f'#inbox [data-task-id="{globex}"]')).to_have_count(0)
    expect(page.locator("[data-elsewhere]")).to_contain_text("1 more waiting")
    expect(page.locator("#inbox-count")).to_have_text("1")

    page.locator("#tenant-switch").select_option("globex")
    expect(page.locator("#inbox-scope")).to_contain_text("Globex Inc")
    expect(page.locator(f'#inbox [data-task-id="{globex}"]')).to_be_visible()
    expect(page.locator(f'#inbox [data-task-id="{acme}"]')).to_have_count(0)
    page.get_by_role("link", name="show all").click()
    expect(page.locator(f'#inbox [data-task-id="{acme}"]')).to_be_visible()
    expect(page.locator(f'#inbox [data-task-id="{globex}"]')).to_be_visible()
    page.goto("/tasks/")
    expect(page.locator(f'[id="row-{globex}"]')).to_be_visible()
    expect(page.locator(f'[id="row-{acme}"]')).to_have_count(0)

    # An audit event's address is its chain and sequence number; the old one is gone.
    page.goto("/audit/")
    page.locator("#audit-results tbody a.mono").first.click()
    page.wait_for_url("**/audit/tenant:globex/*/")
    expect(page.locator("dl.facts")).to_contain_text("tenant:globex")
    acme_pk, acme_seq = backend(first_event, "tenant:acme")
    globex_pk, globex_seq = backend(first_event, "tenant:globex")
    assert acme_seq == globex_seq
    page.goto(f"/audit/tenant:acme/{acme_seq}/")
    expect(page.locator("dl.facts")).to_contain_text("Acme Corp")
    for old in (acme_pk, globex_pk):
        assert page.goto(f"/audit/{old}/").status == 404
    amy = sign_in("amy")  # acme's admin reads acme's chain only
    assert amy.page.goto(f"/audit/tenant:globex/{globex_seq}/").status == 404
    assert amy.page.goto(f"/audit/tenant:acme/{acme_seq}/").status == 200
    not_found = "Failed to load resource: the server responded with a status of 404 (Not Found)"
    assert olga.console_errors == [not_found, not_found]  # the two old addresses, nothing else


def test_times_are_absolute_in_the_viewers_time_zone_with_the_relative_time_beside_them(
    sign_in, mcp_as, backend
):
    from datetime import datetime, timedelta, timezone

    task_id = mcp_as("alice").start("deploy_service", STAGING)
    assert backend.run_task(task_id) == "completed"
    tokyo = timezone(timedelta(hours=9))
    olga = sign_in("olga", timezone_id="Asia/Tokyo")
    page = olga.page
    for path, where in (
        ("/tasks/", f'[id="row-{task_id}"] time'),
        (f"/tasks/{task_id}/", "#sec-timeline time"),
        ("/audit/", "#audit-results tbody time"),
    ):
        response = page.goto(path)
        assert "+09:00" in response.text()  # the server writes them in the browser's zone too
        moment = page.locator(where).first
        created = datetime.fromisoformat(moment.get_attribute("datetime")).astimezone(tokyo)
        expect(moment.locator(".abs")).to_have_text(f"{created:%Y-%m-%d %H:%M} +09:00")
        expect(moment.locator(".rel")).to_have_text("just now")
    # A zone the server was told wrongly (or not yet): the page rewrites the times itself.
    olga.context.add_cookies([{"name": "mcptasks_tz", "value": "UTC", "url": olga.base_url}])
    response = page.goto("/tasks/")
    assert "+09:00" not in response.text()
    moment = page.locator(f'[id="row-{task_id}"] time').first
    created = datetime.fromisoformat(moment.get_attribute("datetime")).astimezone(tokyo)
    expect(moment.locator(".abs")).to_have_text(f"{created:%Y-%m-%d %H:%M} +09:00")
    page.goto("/audit/tenant:acme/1/")
    seconds = page.locator("dl.facts time .abs")
    expect(seconds).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+09:00$"))
    assert not olga.console_errors, olga.console_errors


def test_find_anything_sort_count_and_bulk_cancel_and_reconcile(sign_in, mcp_as, backend):
    from tests.browser.test_dashboard import crash_mid_rollout

    mcp = mcp_as("alice")
    checkout = mcp.start("deploy_service", STAGING)
    billing = [mcp.start("run_pipeline", {"pipeline": f"billing-{n}"}) for n in range(2)]
    crashed = mcp.start("deploy_service", {**STAGING, "service": "ledger"})
    backend(crash_mid_rollout, crashed)
    assert backend.run_task(crashed) == "needs_reconciliation"
    olga = sign_in("olga")
    page = olga.open("/tasks/")
    expect(page.locator("#task-count")).to_contain_text("4 tasks match")
    page.locator("#id_q").fill("checkout")
    page.wait_for_url("**q=checkout*")
    expect(page.locator("#task-results tbody tr")).to_have_count(1)
    expect(page.locator(f'[id="row-{checkout}"]')).to_be_visible()
    expect(page.locator("#task-count")).to_contain_text("1 task matches")
    page.locator("#id_q").fill("")
    page.locator("#id_tool").select_option("run_pipeline")
    expect(page.locator("#task-results tbody tr")).to_have_count(2)
    page.get_by_role("link", name="Created").click()
    page.wait_for_url("**sort=created*")
    expect(page.locator("th[aria-sort='ascending']")).to_have_text("Created ↑")
    assert page.locator("#task-results tbody tr").first.get_attribute("id") == f"row-{billing[0]}"

    for task_id in billing:
        page.locator(f'[id="pick-{task_id}"]').check()
    page.locator("#bulk-reason").fill("Pipeline retired")
    page.get_by_role("button", name="Cancel ticked").click()
    expect(page.locator(".message.success")).to_contain_text("Bulk cancel: 2 cancelled")
    assert "sort=created" in page.url  # back to the same filtered list
    for task_id in billing:
        expect(page.locator(f'[id="row-{task_id}"] [data-state]')).to_have_attribute(
            "data-state", "cancelled"
        )
        assert mcp.get(task_id)["status"] == "cancelled"

    page.goto("/")
    page.locator(f'[data-task-id="{crashed}"] input[name=item]').check()
    page.locator("details.bulk summary").click()
    page.locator("#bulk-reconcile input[value=not_applied]").check()
    page.locator("#bulk-note").fill("No rollout in the deploy log")
    page.get_by_role("button", name="Reconcile ticked").click()
    expect(page.locator(".message.success")).to_contain_text("1 reconciled as not applied")
    page.goto(f"/tasks/{crashed}/")
    expect(page.locator("#sec-timeline")).to_contain_text(
        "not applied — No rollout in the deploy log"
    )
    assert not olga.console_errors, olga.console_errors


def unknown_effect_of(task_id: str) -> int:
    from mcptasks.models import Effect

    return Effect.objects.filter(task_id=task_id, state="unknown").order_by("pk").first().pk


def test_every_page_passes_axe_core_without_serious_or_critical_violations(
    browser, live_url, sign_in, mcp_as, backend
):
    from tests.browser.conftest import axe_violations
    from tests.browser.test_dashboard import crash_mid_rollout

    mcp = mcp_as("alice")
    approval = mcp.start("deploy_service", PRODUCTION)
    assert backend.run_task(approval) == "awaiting_operator"
    crashed = mcp.start("deploy_service", STAGING)
    backend(crash_mid_rollout, crashed)
    assert backend.run_task(crashed) == "needs_reconciliation"
    effect = backend(unknown_effect_of, crashed)
    _, seq = backend(first_event, "tenant:acme")

    anonymous = browser.new_page(base_url=live_url)
    anonymous.goto("/login/")
    found = {"/login/": axe_violations(anonymous)}
    anonymous.close()
    olga = sign_in("olga")
    page = olga.page
    for path in (
        "/",
        "/tasks/",
        "/tasks/?error_code=oops",
        f"/tasks/{approval}/",
        f"/tasks/{crashed}/",
        f"/tasks/{approval}/inputs/approval/",
        f"/effects/{effect}/reconcile",
        "/audit/",
        f"/audit/tenant:acme/{seq}/",
        "/audit/export",
        "/audit/verify",
        "/tokens/",
        "/tasks/no-such-task/",
    ):
        page.goto(path)
        found[path] = axe_violations(page)
    alice = sign_in("alice")
    alice.page.goto(f"/tasks/{approval}/inputs/approval/")  # refused: separation of duties
    found["refusal"] = axe_violations(alice.page)
    bad = {path: v for path, v in found.items() if v}
    assert bad == {}


def test_live_changes_are_announced_and_focus_moves_to_the_first_error(sign_in, mcp_as, backend):
    task_id = mcp_as("alice").start("deploy_service", STAGING)
    olga = sign_in("olga")
    page = olga.open("/tasks/")
    announcer = page.locator("#live-announcer")
    expect(announcer).to_have_attribute("aria-live", "polite")
    assert backend.run_task(task_id) == "completed"
    expect(announcer).to_contain_text("deploy_service", timeout=LIVE_TIMEOUT)
    expect(announcer).to_contain_text("is now completed", timeout=LIVE_TIMEOUT)

    page.locator("#id_error_code").fill("12.5x")
    page.locator("#id_error_code").press("Enter")
    summary = page.locator("#task-results [data-errors]")
    expect(summary).to_be_visible()
    expect(summary).to_be_focused()
    expect(summary.get_by_role("link", name="Error code")).to_be_visible()

    page.goto("/tasks/?error_code=oops")  # a whole page: the field itself, marked invalid
    expect(page.locator("#id_error_code")).to_be_focused()
    expect(page.locator("#id_error_code")).to_have_attribute("aria-invalid", "true")
    assert not olga.console_errors, olga.console_errors


PHONE = {"width": 390, "height": 844}


def fits_the_screen(page: Any) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


def test_on_a_phone_actions_come_first_and_tables_reflow_into_cards(
    sign_in, mcp_as, backend, shoot
):
    from tests.browser.conftest import axe_violations

    approval = mcp_as("alice").start("deploy_service", PRODUCTION)
    assert backend.run_task(approval) == "awaiting_operator"
    olga = sign_in("olga", **PHONE)
    page = olga.open("/tasks/")
    row = page.locator(f'[id="row-{approval}"]')
    assert row.evaluate("r => getComputedStyle(r).display") == "block"  # a card, not a row
    expect(row.locator("td[data-label='Requester']")).to_be_visible()
    assert page.locator("table.tasks thead").bounding_box()["height"] <= 1
    assert fits_the_screen(page)
    # The filters are a closed disclosure: the first task is on the first screen.
    expect(page.locator("#id_q")).to_be_hidden()
    assert page.locator("#task-results tbody tr").first.bounding_box()["y"] < PHONE["height"]
    assert axe_violations(page) == []
    page.get_by_text("Search and filters").click()  # opens without script help
    expect(page.locator("#id_q")).to_be_visible()
    shoot(page, "phone-tasks")

    page.goto("/audit/")
    first = page.locator("#audit-results tbody tr").first
    assert first.evaluate("r => getComputedStyle(r).display") == "block"
    expect(first.locator("td[data-label='Chain']")).to_be_visible()
    assert fits_the_screen(page)
    expect(page.locator("#id_actor")).to_be_hidden()
    assert first.bounding_box()["y"] < PHONE["height"]
    assert axe_violations(page) == []
    shoot(page, "phone-audit")

    page.goto(f"/tasks/{approval}/")
    actions = page.locator("#sec-actions").bounding_box()
    assert actions["y"] < page.locator("#sec-inputs").bounding_box()["y"]
    assert actions["y"] < PHONE["height"]  # on the first screen
    assert fits_the_screen(page)
    shoot(page, "phone-task")

    page.goto("/tasks/?state=awaiting_operator")  # filtered: open, saying how many
    expect(page.locator("details.filter-box")).to_have_attribute("open", "")
    expect(page.locator("details.filter-box summary")).to_contain_text("(1 active)")

    desk = sign_in("olga")  # wide screens keep the two columns, actions beside the inputs
    desk.page.goto("/tasks/")  # and show the filters whatever the disclosure's state
    expect(desk.page.locator("#id_q")).to_be_visible()
    expect(desk.page.locator("details.filter-box summary")).to_be_hidden()
    desk.page.goto(f"/tasks/{approval}/")
    side = desk.page.locator("#sec-actions").bounding_box()
    assert side["x"] > desk.page.locator("#sec-inputs").bounding_box()["x"] + 300
