"""The operations figures (issue 22) on the page and on /metrics agree with the database."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from audit.record import Actor
from mcptasks import keeper, lifecycle, operations
from mcptasks.models import Heartbeat, Task

pytestmark = pytest.mark.django_db


def metric(body: str, name: str, **labels: str) -> float:
    selector = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    pattern = rf"^{name}{{{selector}}} (\S+)$" if labels else rf"^{name} (\S+)$"
    found = re.search(pattern, body, re.MULTILINE)
    assert found, f"{name} {labels} not on /metrics"
    return float(found.group(1))


def test_operations_figures_on_the_page_and_metrics_match_the_database(
    client, client_for, make_task
):
    queued = [make_task("alice") for _ in range(3)] + [make_task("bob", tool_name="ask_twice")]
    lifecycle.task_claim(task_id=queued[0].pk, worker="host:1:1")
    # A lease about to run out.
    Task.objects.filter(pk=queued[0].pk).update(
        lease_expires_at=timezone.now() + timedelta(seconds=1)
    )
    ended = make_task("bob")
    lifecycle.task_fail(
        task_id=ended.pk, actor=Actor.system("t"), error=lifecycle.error_object("x")
    )
    keeper.beat("worker:w1@host", pid=1, concurrency=4)
    Heartbeat.objects.create(
        name="worker:gone@host", seen_at=timezone.now() - timedelta(minutes=5), data={}
    )

    ops = operations.snapshot()
    assert {r["name"]: (r["queued"], r["running"]) for r in ops.by_tenant} == {
        "acme": (2, 1),
        "globex": (1, 0),
    }
    assert {r["name"]: (r["queued"], r["running"]) for r in ops.by_tool} == {
        "echo_task": (2, 1),
        "ask_twice": (1, 0),
    }
    assert ops.failed_last_hour == 1 and ops.completed_last_hour == 0 and ops.failure_rate == 1
    assert ops.oldest_queued["pk"] == queued[1].pk
    assert [row["pk"] for row in ops.leases_near_expiry] == [queued[0].pk]
    assert {w.name: w.alive for w in ops.workers} == {"w1@host": True, "gone@host": False}

    body = client.get("/metrics").content.decode()
    assert metric(body, "mcptasks_tasks_by_tenant", tenant="acme", state="queued") == 2
    assert metric(body, "mcptasks_tasks_by_tenant", tenant="acme", state="running") == 1
    assert metric(body, "mcptasks_tasks_by_tool", tool="ask_twice", state="queued") == 1
    assert metric(body, "mcptasks_tasks_ended_last_hour", outcome="failed") == 1
    assert metric(body, "mcptasks_leases_near_expiry") == 1
    assert metric(body, "mcptasks_workers_alive") == 1
    assert metric(body, "mcptasks_oldest_queued_seconds") >= 0

    page = client_for("olga").get(reverse("dashboard:operations"))
    assert page.status_code == 200
    html = page.content.decode()
    assert (
        'data-tenant="acme"><td class="mono">acme</td><td data-queued>2</td>'
        "<td data-running>1</td>" in html
    )
    assert client_for("alice").get(reverse("dashboard:operations")).status_code == 403


def test_the_backlog_by_tenant_and_by_tool_is_read_in_one_pass(make_task):
    # At 1,000,000 tasks the queued rows lie all over the heap: each pass over them cost about
    # 85 ms (B4), so both count tables come from one grouped query.
    make_task("alice")
    make_task("bob", tool_name="ask_twice")
    with CaptureQueriesContext(connection) as queries:
        ops = operations.snapshot()
    # (the states written into the statement: mcptasks.plans.written)
    backlog = [q["sql"] for q in queries.captured_queries if "('queued'), ('running')" in q["sql"]]
    assert len(backlog) == 1, backlog
    assert [r["name"] for r in ops.by_tenant] == ["acme", "globex"]
    assert [r["name"] for r in ops.by_tool] == ["ask_twice", "echo_task"]


@pytest.mark.parametrize(
    ("name", "linked"), [("olga", True), ("alice", False), ("amy", False), ("carl", False)]
)
def test_the_operations_link_is_in_the_navigation_of_operators_only(client_for, name, linked):
    url = reverse("dashboard:operations")
    page = client_for(name).get(reverse("dashboard:tasks"))
    assert page.status_code == 200
    assert (f'href="{url}"' in page.content.decode()) is linked
    assert client_for(name).get(url).status_code == (200 if linked else 403)
