"""The dashboard for a day's work, without a browser: cache headers of pages and fragments,
search, sorting, counts and bulk actions, tenant-scoped audit addresses, one tenant scope, and
times in the viewer's time zone."""

from __future__ import annotations

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db

FRAGMENT = {"HX-Request": "true", "HX-Target": "task-results"}


def test_pages_and_fragments_vary_on_htmx_and_fragments_are_never_stored(
    cast, client_for, make_task
):
    make_task("alice")
    olga = client_for("olga")
    url = reverse("dashboard:tasks") + "?state=queued"
    whole = olga.get(url)
    fragment = olga.get(url, headers=FRAGMENT)
    restore = olga.get(url, headers={"HX-Request": "true", "HX-History-Restore-Request": "true"})
    assert "<header" in whole.content.decode() and "<header" not in fragment.content.decode()
    assert "<header" in restore.content.decode()  # htmx restoring history gets the whole page
    for response in (whole, fragment, restore):
        vary = {part.strip().lower() for part in response["Vary"].split(",")}
        assert {"hx-request", "hx-target", "hx-history-restore-request", "cookie"} <= vary
        assert "private" in response["Cache-Control"]
    assert "no-cache" in whole["Cache-Control"] and "no-store" not in whole["Cache-Control"]
    assert "no-store" in fragment["Cache-Control"]


def test_an_audit_event_is_addressed_by_its_chain_and_sequence_and_old_urls_answer_404(
    cast, client_for, make_task
):
    from audit.models import AuditEvent

    make_task("alice")
    make_task("bob")
    acme = AuditEvent.objects.filter(chain="tenant:acme").order_by("seq").first()
    globex = AuditEvent.objects.get(chain="tenant:globex", seq=acme.seq)  # the same number
    carl, amy = client_for("carl"), client_for("amy")
    for event in (acme, globex):
        url = reverse("dashboard:audit_event", args=[event.chain, event.seq])
        assert url == f"/audit/{event.chain}/{event.seq}/"
        page = carl.get(url)
        assert page.status_code == 200 and page.context["event"].pk == event.pk
    assert amy.get(f"/audit/tenant:globex/{globex.seq}/").status_code == 404
    assert amy.get(f"/audit/tenant:acme/{acme.seq}/").status_code == 200
    for old in (acme.pk, globex.pk):  # the primary key addresses nothing any more
        assert carl.get(f"/audit/{old}/").status_code == 404
    assert carl.get("/audit/tenant:acme/999999/").status_code == 404
    assert carl.get("/audit/tenant:nowhere/1/").status_code == 404


def test_the_inbox_follows_the_tenant_scope_and_says_what_waits_elsewhere(
    cast, client_for, awaiting
):
    acme, globex = awaiting("alice"), awaiting("bob")
    olga = client_for("olga")

    def listed(**params: str) -> tuple[list[str], str]:
        response = olga.get(reverse("dashboard:inbox"), params)
        assert response.status_code == 200
        return [r.task_id for r in response.context["inbox"].inputs], response.content.decode()

    shown, html = listed()  # the switcher's tenant: acme, olga's first
    assert shown == [acme.pk] and 'data-elsewhere="1"' in html and 'data-total="1"' in html
    olga.post(reverse("dashboard:switch_tenant"), {"tenant": "globex", "next": "/"})
    shown, html = listed()
    assert shown == [globex.pk] and 'data-elsewhere="1"' in html
    assert listed(tenant="acme")[0] == [acme.pk]  # a shared link names its scope
    shown, html = listed(tenant="")
    assert set(shown) == {acme.pk, globex.pk} and "data-elsewhere" not in html
    fragment = olga.get(reverse("dashboard:inbox"), {"fragment": "1", "tenant": "acme"})
    assert fragment.context["inbox"].inputs[0].task_id == acme.pk
    refused = olga.get(reverse("dashboard:inbox"), {"tenant": "initech"})
    assert (
        refused.status_code == 400 and "no tenant &#x27;initech&#x27;" in refused.content.decode()
    )
    assert refused.context["inbox"].total == 0


ISO_WITH_OFFSET = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?[+-]\d\d:\d\d$"


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_exports_write_iso_8601_times_with_their_offset_whatever_the_viewers_zone(
    cast, client_for, make_task, fmt
):
    import csv
    import io
    import json
    import re
    import zipfile

    from dashboard.pages import TIME_ZONE_COOKIE

    make_task("alice")
    carl = client_for("carl")
    carl.cookies[TIME_ZONE_COOKIE] = "Asia/Tokyo"
    response = carl.post(reverse("dashboard:audit_export"), {"tenant": "acme", "format": fmt})
    with pytest.warns(Warning, match="asynchronous iterators"):  # served async under ASGI
        body = b"".join(response)
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        data_name = next(n for n in archive.namelist() if not n.endswith(".manifest.json"))
        text = archive.read(data_name).decode()
        manifest = json.loads(archive.read(data_name + ".manifest.json"))
    rows = (
        [json.loads(line) for line in text.splitlines()]
        if fmt == "jsonl"
        else list(csv.DictReader(io.StringIO(text)))
    )
    assert rows and all(re.match(ISO_WITH_OFFSET, row["created_at"]) for row in rows)
    assert re.match(ISO_WITH_OFFSET, manifest["created_at"])


def test_pages_write_times_in_the_viewers_zone_and_ignore_a_bogus_one(cast, client_for, make_task):
    from dashboard.pages import TIME_ZONE_COOKIE

    make_task("alice")
    olga = client_for("olga")
    olga.cookies[TIME_ZONE_COOKIE] = "America/Sao_Paulo"
    assert "-03:00</span>" in olga.get(reverse("dashboard:tasks")).content.decode()
    for bogus in ("Mars/Olympus", "../../etc/passwd", "x" * 100):
        olga.cookies[TIME_ZONE_COOKIE] = bogus
        html = olga.get(reverse("dashboard:tasks")).content.decode()
        assert " UTC</span>" in html and 'data-tz="UTC"' in html


# ---------------------------------------------------------------- find anything
def listed(client, **params) -> list[str]:
    response = client.get(reverse("dashboard:tasks"), {"tenant": "", **params})
    assert response.status_code == 200
    return [task.pk for task in response.context["page"].rows]


def test_search_finds_tasks_by_tool_requester_status_and_argument_summary_never_by_a_secret(
    cast, client_for, make_task, running
):
    from mcptasks import lifecycle

    checkout = make_task("alice", arguments={"service": "checkout", "api_key": "sk-live-9f8e7d"})
    other = make_task("bob", tool_name="ask_twice", arguments={"service": "billing"})
    busy = running("adam")
    lifecycle.task_report(
        task_id=busy.pk, attempt=busy.attempt, message="Migrating ledger, password=hunter2xyz"
    )
    olga = client_for("olga")
    assert listed(olga, q="checkout") == [checkout.pk]  # an argument value
    assert listed(olga, q="CHECKOUT") == [checkout.pk]  # any case
    assert listed(olga, q="ask_tw") == [other.pk]  # the tool
    assert listed(olga, q="bob") == [other.pk]  # the requester
    assert listed(olga, q="ledger") == [busy.pk]  # the status message
    for secret in ("sk-live-9f8e7d", "hunter2xyz"):  # redacted text only
        assert listed(olga, q=secret) == []
    assert listed(client_for("alice"), q="billing") == []  # still only what she may see
    assert set(listed(olga, q="ec")) == set()  # two letters: ids only


def test_outcome_error_code_sort_and_total_count(cast, client_for, make_task, running):
    from mcptasks import lifecycle
    from mcptasks.lifecycle import error_object

    done = running("alice")
    lifecycle.task_complete(task_id=done.pk, attempt=done.attempt, result={"content": []})
    refused = running("alice")
    lifecycle.task_complete(
        task_id=refused.pk, attempt=refused.attempt, result={"content": [], "isError": True}
    )
    failed = running("alice")
    lifecycle.task_fail(
        task_id=failed.pk,
        attempt=failed.attempt,
        actor=lifecycle.Actor.system("worker"),
        error=error_object("boom", code=-32001),
    )
    queued = make_task("alice")
    lifecycle.task_request_cancel(task_id=queued.pk, actor=lifecycle.Actor.system("test"))
    olga = client_for("olga")
    assert listed(olga, outcome="completed") == [done.pk]
    assert listed(olga, outcome="rejected") == [refused.pk]
    assert listed(olga, outcome="failed") == [failed.pk]
    assert listed(olga, outcome="cancelled") == [queued.pk]
    assert listed(olga, error_code="-32001") == [failed.pk]
    assert listed(olga, error_code="-32603") == []
    bad = olga.get(reverse("dashboard:tasks"), {"error_code": "boom", "outcome": "exploded"})
    html = bad.content.decode()
    assert 'role="alert"' in html and "Error code" in html and bad.context["page"].rows == []
    newest = listed(olga)
    assert newest == [queued.pk, failed.pk, refused.pk, done.pk]
    assert listed(olga, sort="created") == newest[::-1]
    assert listed(olga, sort="-updated")[0] == queued.pk
    page = olga.get(reverse("dashboard:tasks"), {"tenant": "", "sort": "created"})
    assert page.context["page"].total == 4
    assert "4 tasks match" in page.content.decode()
    assert 'aria-sort="ascending"' in page.content.decode()


def test_sorted_pages_follow_their_cursors_both_ways(cast, client_for, make_task):
    from mcptasks import queries

    made = [make_task("alice").pk for _ in range(5)]
    olga = client_for("olga")
    user = olga.get(reverse("dashboard:tasks")).wsgi_request.user
    filters = queries.TaskFilters(sort="created")
    first = queries.task_page(user, filters, limit=2)
    second = queries.task_page(user, filters, older_than=first.older, limit=2)
    back = queries.task_page(user, filters, newer_than=second.newer, limit=2)
    assert [t.pk for t in first.rows + second.rows] == made[:4]
    assert [t.pk for t in back.rows] == made[:2]


def test_bulk_cancel_audits_each_task_and_refuses_non_operators(
    cast, client_for, make_task, running
):
    from audit.models import AuditEvent
    from mcptasks.models import Task

    queued = [make_task("alice"), make_task("bob")]
    busy = running("alice")
    finished = running("alice")
    from mcptasks import lifecycle

    lifecycle.task_complete(task_id=finished.pk, attempt=finished.attempt, result={"content": []})
    ids = [t.pk for t in [*queued, busy, finished]] + ["no-such-task"]
    olga = client_for("olga")
    response = olga.post(
        reverse("dashboard:bulk_cancel"),
        {"item": ids, "reason": "release frozen", "next": "/tasks/?state=queued"},
    )
    assert response.status_code == 302 and response["Location"] == "/tasks/?state=queued"
    assert [Task.objects.get(pk=t.pk).state for t in queued] == ["cancelled", "cancelled"]
    assert Task.objects.get(pk=busy.pk).cancel_requested_at is not None
    for task in [*queued, busy]:
        events = AuditEvent.objects.filter(task_id=task.pk, action="task.cancel_requested")
        assert [e.data["reason"] for e in events] == ["release frozen"]
        assert events[0].actor_display == "olga"
    message = str(next(iter(olga.get("/tasks/").context["messages"])))
    assert "2 cancelled" in message and "1 cancel requested" in message
    assert (
        "1 already ended, nothing to cancel" in message
        and "1 not permitted or not found" in message
    )
    assert (
        client_for("alice")
        .post(reverse("dashboard:bulk_cancel"), {"item": [queued[0].pk], "reason": "x"})
        .status_code
        == 403
    )
    other = make_task("alice")
    olga.post(reverse("dashboard:bulk_cancel"), {"item": [other.pk], "reason": ""})
    assert Task.objects.get(pk=other.pk).state == "queued"  # a reason is required
    many = olga.post(
        reverse("dashboard:bulk_cancel"), {"item": [str(n) for n in range(101)], "reason": "x"}
    )
    assert many.status_code == 302 and Task.objects.get(pk=other.pk).state == "queued"


def test_bulk_reconcile_takes_each_effect_through_lifecycle(cast, client_for, unknown_effect):
    from audit.models import AuditEvent
    from mcptasks.models import Effect

    tasks = [unknown_effect("alice"), unknown_effect("bob")]
    effects = [Effect.objects.get(task_id=t.pk, step="rollout") for t in tasks]
    olga = client_for("olga")
    refused = olga.post(
        reverse("dashboard:bulk_reconcile"),
        {"item": [e.pk for e in effects], "decision": "applied", "note": "checked"},
    )
    assert refused.status_code == 302
    assert {e.state for e in Effect.objects.filter(pk__in=[e.pk for e in effects])} == {"unknown"}
    olga.post(
        reverse("dashboard:bulk_reconcile"),
        {
            "item": [e.pk for e in effects] + ["99999999999999999999"],
            "decision": "not_applied",
            "note": "no trace in the deploy log",
        },
    )
    for effect in effects:
        assert Effect.objects.get(pk=effect.pk).state == "reconciled_not_applied"
        assert (
            AuditEvent.objects.filter(task_id=effect.task_id, action="effect.reconciled").count()
            == 1
        )
    assert (
        client_for("carl")
        .post(
            reverse("dashboard:bulk_reconcile"),
            {"item": [effects[0].pk], "decision": "not_applied", "note": "x"},
        )
        .status_code
        == 403
    )


@pytest.mark.parametrize("target", ["//evil.example/", "/\\evil.example/", "https://evil.example/"])
def test_bulk_actions_come_back_only_to_this_site(cast, client_for, make_task, target):
    task = make_task("alice")
    response = client_for("olga").post(
        reverse("dashboard:bulk_cancel"), {"item": [task.pk], "reason": "stop", "next": target}
    )
    assert response.status_code == 302 and response["Location"] == reverse("dashboard:tasks")
