"""The dashboard end to end in headless Chromium: live approvals through the generated form,
separation of duties, force cancel, reconciliation after a crash, named approvers, tenant
isolation, and the auditor's pages. Screenshots go to screenshots/ (git-ignored)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LIVE_TIMEOUT = 15_000
PRODUCTION = {"service": "billing", "version": "2.0.0", "environment": "production"}


def crash_mid_rollout(task_id: str) -> None:
    """A worker claims the task, starts its rollout step and dies before confirming it; its
    lease runs out and the reaper gives the task back to the queue."""
    from django.utils import timezone

    from mcptasks import lifecycle
    from mcptasks.models import Task

    task = lifecycle.task_claim(task_id=task_id, worker="doomed-worker")
    lifecycle.task_effect_intended(
        task_id=task_id,
        attempt=task.attempt,
        step="rollout",
        idempotency_key=f"{task_id}:rollout",
        idempotent=False,
    )
    Task.objects.filter(pk=task_id).update(lease_expires_at=timezone.now() - timedelta(minutes=1))
    lifecycle.task_requeue(task_id=task_id)


def row(page: Any, task_id: str) -> Any:
    return page.locator(f'[id="row-{task_id}"]')


def head_state(page: Any) -> Any:
    return page.locator("#sec-head [data-state]")


def test_operator_approves_a_production_deploy_and_everything_updates_live(
    browser, live_url, sign_in, mcp_as, backend, shoot
):
    login = browser.new_page(base_url=live_url)
    login.goto("/login/")
    shoot(login, "login")
    login.close()

    olga = sign_in("olga")
    inbox = olga.page
    inbox.wait_for_selector("#live-status[data-state='live']", timeout=LIVE_TIMEOUT)
    inbox.evaluate("window.__sameDocument = true")
    tasks = olga.open("/tasks/")

    mcp = mcp_as("alice")
    task_id = mcp.start("deploy_service", PRODUCTION)
    expect(row(tasks, task_id)).to_be_visible(timeout=LIVE_TIMEOUT)  # a new row, live
    assert backend.run_task(task_id) == "awaiting_operator"

    card = inbox.locator(f'#inbox [data-task-id="{task_id}"]')
    expect(card).to_be_visible(timeout=LIVE_TIMEOUT)
    expect(card).to_contain_text("Approve rollout of billing 2.0.0 to production?")
    expect(inbox.locator("#inbox-count")).to_have_text("1", timeout=LIVE_TIMEOUT)
    assert inbox.evaluate("window.__sameDocument") is True  # no reload
    expect(row(tasks, task_id).locator("[data-state]")).to_have_attribute(
        "data-state", "awaiting_operator", timeout=LIVE_TIMEOUT
    )
    shoot(inbox, "inbox")
    phone = sign_in("olga", width=390)
    shoot(phone.page, "inbox-phone")
    detail = olga.open(f"/tasks/{task_id}/")

    card.get_by_role("link", name="Answer").click()
    inbox.wait_for_url(f"**/tasks/{task_id}/inputs/approval/")
    # An approval gate: what is approved, and Approve / Reject (issue 21).
    expect(inbox.locator("[data-summary]")).to_contain_text("billing")
    expect(inbox.locator("[data-summary]")).to_contain_text("2.0.0")
    shoot(inbox, "approval-form")
    inbox.locator('[name="approval-comment"]').fill("Change CHG-42 approved by CAB")
    inbox.locator('button[value="approve"]').click()
    inbox.wait_for_url(f"**/tasks/{task_id}/#timeline")
    expect(inbox.locator(".message.success")).to_contain_text("Approved 'approval'")
    expect(detail.locator("#sec-timeline")).to_contain_text(
        "Approved approval via dashboard (1 of 1) — Change CHG-42 approved by CAB",
        timeout=LIVE_TIMEOUT,
    )  # the open tab, live

    assert backend.run_task(task_id) == "completed"
    expect(row(tasks, task_id).locator("[data-state]")).to_have_attribute(
        "data-state", "completed", timeout=LIVE_TIMEOUT
    )
    expect(head_state(detail)).to_have_attribute("data-state", "completed", timeout=LIVE_TIMEOUT)
    expect(detail.locator("#sec-outcome")).to_contain_text("rollout")
    expect(detail.locator("#sec-timeline")).to_contain_text("Completed")
    assert mcp.get(task_id)["status"] == "completed"
    olga.page.goto("/")
    expect(olga.page.locator(f'#inbox [data-task-id="{task_id}"]')).to_have_count(0)
    shoot(tasks, "tasks")
    shoot(detail, "task-detail")

    # The filters apply in place (htmx) and keep the URL shareable.
    tasks.evaluate("window.__sameDocument = true")
    tasks.locator("#id_state").select_option("failed")
    expect(tasks.locator("#task-results")).to_contain_text("No tasks match")
    assert "state=failed" in tasks.url
    tasks.locator("#id_state").select_option("completed")
    expect(row(tasks, task_id)).to_be_visible()
    assert tasks.evaluate("window.__sameDocument") is True

    phone.page.goto(f"/tasks/{task_id}/")
    shoot(phone.page, "task-detail-phone")
    assert not olga.csp_violations(), olga.csp_violations()
    assert not olga.console_errors, olga.console_errors


def test_requester_cannot_approve_her_own_deployment_and_sees_why(sign_in, mcp_as, backend):
    task_id = mcp_as("alice").start("deploy_service", PRODUCTION)
    assert backend.run_task(task_id) == "awaiting_operator"
    alice = sign_in("alice")
    page = alice.page
    expect(page.locator(f'#inbox [data-task-id="{task_id}"]')).to_have_count(0)
    page.goto(f"/tasks/{task_id}/")
    expect(page.locator("#sec-inputs [data-refusal]")).to_contain_text("forbids self-approval")
    expect(page.locator("#sec-inputs").get_by_role("link", name="Answer")).to_have_count(0)
    response = page.goto(f"/tasks/{task_id}/inputs/approval/")
    assert response.status == 403
    expect(page.locator("[data-refusal]")).to_contain_text("separation of duties")
    expect(page.locator('button[value="approve"]')).to_have_count(0)
    assert not alice.csp_violations()


def test_force_cancel_reconcile_and_named_approver_all_show_in_the_timeline(
    sign_in, mcp_as, backend, shoot
):
    mcp = mcp_as("alice")
    olga = sign_in("olga")

    # Force cancel, with a reason and a confirmation.
    stuck = mcp.start("deploy_service", PRODUCTION)
    assert backend.run_task(stuck) == "awaiting_operator"
    page = olga.open(f"/tasks/{stuck}/")
    force = page.locator("details[data-action='force-cancel']")
    force.locator("summary").click()
    force.locator("textarea[name=reason]").fill("Release window closed")
    force.locator("input[name=confirm]").check()
    force.locator("button[type=submit]").click()
    expect(page.locator("#sec-timeline")).to_contain_text(
        "Force-cancelled reason: Release window closed"
    )
    expect(head_state(page)).to_have_attribute("data-state", "cancelled")
    expect(page.locator("details[data-action='force-cancel']")).to_have_count(0)

    # A crash mid-rollout leaves the step's outcome unknown; the operator reconciles it.
    crashed = mcp.start("deploy_service", {**PRODUCTION, "environment": "staging"})
    backend(crash_mid_rollout, crashed)
    assert backend.run_task(crashed) == "needs_reconciliation"
    olga.page.goto("/")
    expect(olga.page.locator(f'#inbox [data-task-id="{crashed}"][data-effect-id]')).to_be_visible()
    page = olga.open(f"/tasks/{crashed}/")
    reconcile = page.locator("details[data-reconcile='rollout']")
    reconcile.locator("summary").click()
    reconcile.locator("input[name=decision][value=not_applied]").check()
    reconcile.locator("textarea[name=note]").fill("No rollout in the deploy log")
    reconcile.locator("button[type=submit]").click()
    timeline = page.locator("#sec-timeline")
    expect(timeline).to_contain_text("Effect outcome unknown step rollout")
    expect(timeline).to_contain_text("rollout: not applied — No rollout in the deploy log")
    assert backend.run_task(crashed) == "completed"
    expect(head_state(page)).to_have_attribute("data-state", "completed", timeout=LIVE_TIMEOUT)

    # adam, a plain member, is named approver and approves.
    gated = mcp.start("deploy_service", PRODUCTION)
    assert backend.run_task(gated) == "awaiting_operator"
    page = olga.open(f"/tasks/{gated}/")
    page.locator("#id_grantee").select_option(label="adam")
    page.locator("#id_delegation").select_option("answer")
    page.locator(".grant-form button[type=submit]").click()
    expect(page.locator("#sec-timeline")).to_contain_text("Delegation granted adam as approver")
    expect(page.locator("#sec-delegations")).to_contain_text("adam — approver")
    adam = sign_in("adam")
    card = adam.page.locator(f'#inbox [data-task-id="{gated}"]')
    expect(card).to_be_visible()
    card.get_by_role("link", name="Answer").click()
    adam.page.locator('button[value="approve"]').click()
    expect(adam.page.locator("#sec-timeline")).to_contain_text("Approved approval via dashboard")
    expect(adam.page.locator("#sec-inputs")).to_contain_text("by adam")
    assert backend.run_task(gated) == "completed"
    expect(head_state(page)).to_have_attribute("data-state", "completed", timeout=LIVE_TIMEOUT)
    shoot(page, "timeline-delegation")
    assert not olga.csp_violations() and not adam.csp_violations()


def test_tenant_isolation_and_the_auditors_pages(sign_in, mcp_as, backend, shoot, tmp_path):
    globex = mcp_as("bob").start("deploy_service", PRODUCTION)
    acme = mcp_as("alice").start("deploy_service", PRODUCTION)
    assert backend.run_task(acme) == "awaiting_operator"
    assert backend.run_task(globex) == "awaiting_operator"

    alice = sign_in("alice")
    for path in (f"/tasks/{globex}/", f"/tasks/{globex}/inputs/approval/"):
        response = alice.page.goto(path)
        assert response.status == 404, path
        expect(alice.page.locator("h1")).to_have_text("Not found")
    expect(alice.page.get_by_role("link", name="Audit")).to_have_count(0)

    carl = sign_in("carl")
    page = carl.page
    page.goto(f"/tasks/{acme}/")
    expect(head_state(page)).to_have_attribute("data-state", "awaiting_operator")
    for text in ("Cancel…", "Force cancel…", "Grant", "Revoke"):
        expect(page.get_by_text(text, exact=True)).to_have_count(0)
    expect(page.locator("#sec-inputs").get_by_role("link", name="Answer")).to_have_count(0)
    expect(page.locator("#sec-actions")).to_contain_text("No actions for you")

    page.goto("/audit/")
    page.locator("#id_tenant").select_option("*")
    expect(page.locator("#audit-results")).to_contain_text("tenant:globex")
    expect(page.locator("#audit-results")).to_contain_text("task.input_requested")
    shoot(page, "audit")
    page.locator("#audit-results a.mono").first.click()
    expect(page.locator("dl.facts")).to_contain_text("Hash")

    page.goto("/audit/export")
    page.locator("#id_tenant").select_option("acme")
    with page.expect_download() as download_info:
        page.get_by_role("button", name="Download export").click()
    download = download_info.value
    assert download.suggested_filename.startswith("audit-acme-")
    archive = tmp_path / download.suggested_filename
    download.save_as(archive)

    page.goto("/audit/verify")
    page.locator("#archive").set_input_files(str(archive))
    page.get_by_role("button", name="Check export").click()
    expect(page.locator("[data-export-verdict]")).to_have_attribute("data-export-verdict", "ok")
    page.get_by_role("button", name="Verify all").click()
    for chain in ("tenant:acme", "tenant:globex"):
        expect(page.locator(f'[data-chain="{chain}"] [data-verdict]')).to_contain_text("intact")
    assert not carl.csp_violations() and not alice.csp_violations()
