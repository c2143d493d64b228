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
