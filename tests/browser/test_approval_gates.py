"""Approval gates in headless Chromium (issue 21): with the demo's two-approval policy, olga
and amy have the deploy open; olga approves and amy's page shows "1 of 2" live; amy rejects
with a comment, which shows on the timeline (her open approval page showed "1 of 2" live too); the task ends *rejected*; carl, an auditor, never
sees an Approve button."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE_TIMEOUT = 15_000
PRODUCTION = {"service": "billing", "version": "3.1.0", "environment": "production"}


def seed_two_approval_policy() -> None:
    from django.contrib.auth import get_user_model

    from mcptasks.management.commands.seed_demo import RELEASE_MANAGERS, seed_release_managers

    people = get_user_model().objects.filter(username__in=[*RELEASE_MANAGERS, "amy"])
    seed_release_managers({user.username: {"user": user} for user in people})


def test_two_reviewers_one_approves_live_the_other_rejects_and_the_task_is_rejected(
    sign_in, mcp_as, backend, shoot
):
    backend(seed_two_approval_policy)
    mcp = mcp_as("alice")
    task_id = mcp.start("deploy_service", PRODUCTION)
    assert backend.run_task(task_id) == "awaiting_operator"

    olga, amy = sign_in("olga"), sign_in("amy")
    amys_task = amy.open(f"/tasks/{task_id}/")
    amys_gate = amy.open(f"/tasks/{task_id}/inputs/approval/")
    expect(amys_gate.locator("[data-progress]")).to_contain_text("0 of 2")
    gate = olga.open(f"/tasks/{task_id}/inputs/approval/")
    expect(gate.locator("[data-progress]")).to_contain_text("0 of 2")
    expect(gate.locator("[data-summary]")).to_contain_text("3.1.0")
    shoot(gate, "approval-gate")
    gate.locator('button[value="approve"]').click()
    gate.wait_for_url(f"**/tasks/{task_id}/#timeline")
    expect(amys_task.locator("body")).to_contain_text(
        "Waiting for approval (1 of 2)", timeout=LIVE_TIMEOUT
    )  # amy's open task page, live
    # amy's open approval page too, without a reload: the progress and olga's decision.
    expect(amys_gate.locator("[data-progress]")).to_contain_text("1 of 2", timeout=LIVE_TIMEOUT)
    expect(amys_gate.locator("[data-decisions]")).to_contain_text("olga approved")
    amys_gate.locator('button[value="reject"]').click()  # no comment: refused by the form
    expect(amys_gate.locator(".field-error")).to_contain_text("comment")
    amys_gate.locator('[name="approval-comment"]').fill("Freeze until the incident review")
    amys_gate.locator('button[value="reject"]').click()
    amys_gate.wait_for_url(f"**/tasks/{task_id}/#timeline")
    expect(amys_gate.locator("#sec-timeline")).to_contain_text(
        "Rejected approval via dashboard (1 of 2) — Freeze until the incident review"
    )

    assert backend.run_task(task_id) == "completed"
    expect(amys_gate.locator("#sec-head [data-state]")).to_have_attribute(
        "data-state", "rejected", timeout=LIVE_TIMEOUT
    )
    assert mcp.get(task_id)["result"]["structuredContent"]["status"] == "rejected"
    listed = olga.open("/tasks/?outcome=rejected")
    expect(listed.locator(f'[id="row-{task_id}"]')).to_be_visible()

    carl = sign_in("carl")
    gated = mcp.start("deploy_service", PRODUCTION)
    assert backend.run_task(gated) == "awaiting_operator"
    page = carl.open(f"/tasks/{gated}/inputs/approval/")
    expect(page.locator("[data-refusal]")).to_contain_text("auditor")
    expect(page.locator('button[value="approve"]')).to_have_count(0)
    assert not olga.csp_violations() and not amy.csp_violations()


def test_a_tenant_admin_creates_a_rule_and_a_group_and_the_next_deploy_applies_them(
    sign_in, mcp_as, backend, shoot
):
    amy = sign_in("amy")
    page = amy.open("/tasks/")
    page.get_by_role("link", name="Approval policies").click()
    page.wait_for_url("**/approval-policies/")
    expect(page.locator("[data-rules]")).to_contain_text("No rules")

    group = page.locator("[data-group-form]")
    group.locator('[name="group-name"]').fill("release-managers")
    group.get_by_label("olga").check()
    group.get_by_label("adam").check()
    group.get_by_role("button", name="Save group").click()
    page.wait_for_url("**/approval-policies/")
    expect(page.locator('[data-group="release-managers"]')).to_contain_text("adam, olga")

    rule = page.locator("[data-rule-form]")
    rule.locator('[name="rule-tool"]').select_option("deploy_service")
    rule.locator('[name="rule-argument"]').fill("environment")
    rule.locator('[name="rule-value"]').fill("prod")  # not one of the tool's values
    rule.locator('[name="rule-required"]').fill("2")
    rule.get_by_label("release-managers").check()
    rule.get_by_role("button", name="Save rule").click()
    expect(page.locator("[data-rule-form] [data-errors]")).to_contain_text(
        "environment is one of staging, production"
    )
    page.locator('[name="rule-value"]').fill("production")
    page.locator("[data-rule-form]").get_by_role("button", name="Save rule").click()
    page.wait_for_url("**/approval-policies/")
    expect(page.locator("[data-rules]")).to_contain_text("environment=production")
    expect(page.locator("[data-rules]")).to_contain_text("groups release-managers")
    shoot(page, "approval-policies")

    task_id = mcp_as("alice").start("deploy_service", PRODUCTION)
    assert backend.run_task(task_id) == "awaiting_operator"
    olga = sign_in("olga")
    gate = olga.open(f"/tasks/{task_id}/inputs/approval/")
    expect(gate.locator("[data-progress]")).to_contain_text("0 of 2")
    expect(gate.locator("[data-progress]")).to_contain_text("groups release-managers")
    expect(gate.locator("[data-policy-digest]")).to_contain_text("rule version 1")
    expect(olga.open("/tasks/").get_by_role("link", name="Approval policies")).to_have_count(0)
    assert not amy.csp_violations()
