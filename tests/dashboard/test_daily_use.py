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
