"""The operations page in headless Chromium (issue 22): it renders for an operator, its counts
match the database, and a member is refused."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PRODUCTION = {"service": "billing", "version": "2.0.0", "environment": "production"}


def database_figures() -> dict[str, Any]:
    from django.db.models import Count

    from mcptasks import keeper
    from mcptasks.models import Task

    keeper.beat("worker:ops-test@host", pid=1, concurrency=2)
    rows = (
        Task.objects.filter(state__in=["queued", "running"])
        .values("tenant__slug", "state")
        .annotate(n=Count("pk"))
    )
    by_tenant: dict[str, dict[str, int]] = {}
    for row in rows:
        by_tenant.setdefault(row["tenant__slug"], {"queued": 0, "running": 0})[row["state"]] = row[
            "n"
        ]
    return {
        "by_tenant": by_tenant,
        "failed": Task.objects.filter(state="failed").count(),
        "completed": Task.objects.filter(state="completed").count(),
    }


def test_operations_page_renders_and_its_counts_match_the_database(sign_in, mcp_as, backend, shoot):
    from audit.record import Actor
    from mcptasks import lifecycle

    alice, bob = mcp_as("alice"), mcp_as("bob")
    queued = [alice.start("deploy_service", PRODUCTION) for _ in range(3)]
    queued.append(bob.start("deploy_service", PRODUCTION))
    done = bob.start("deploy_service", PRODUCTION)
    backend(lifecycle.task_claim, task_id=queued[0], worker="ops-host:1:1")
    backend(
        lifecycle.task_fail,
        task_id=done,
        actor=Actor.system("test"),
        error=lifecycle.error_object("boom"),
    )
    figures = backend(database_figures)

    olga = sign_in("olga")
    page = olga.page
    response = page.goto("/operations")
    assert response.status == 200
    expect(page.locator("h1")).to_have_text("Operations")
    for slug, counts in figures["by_tenant"].items():
        row = page.locator(f'[data-ops="tenants"] tr[data-tenant="{slug}"]')
        expect(row.locator("[data-queued]")).to_have_text(str(counts["queued"]))
        expect(row.locator("[data-running]")).to_have_text(str(counts["running"]))
    assert figures["by_tenant"]["acme"] == {"queued": 2, "running": 1}
    tool = page.locator('[data-ops="tools"] tr[data-tool="deploy_service"]')
    expect(tool.locator("[data-queued]")).to_have_text("3")
    expect(tool.locator("[data-running]")).to_have_text("1")
    expect(page.locator('[data-figure="failed"]')).to_have_text(str(figures["failed"]))
    expect(page.locator('[data-figure="completed"]')).to_have_text(str(figures["completed"]))
    expect(page.locator('[data-figure="oldest-queued"]')).to_contain_text("deploy_service")
    expect(page.locator('[data-worker="ops-test@host"]')).to_contain_text("alive")
    expect(page.locator('[data-owner="ops-host:1:1"] [data-running]')).to_have_text("1")
    shoot(page, "operations")

    member = sign_in("alice")
    assert member.page.goto("/operations").status == 403
