"""On a phone the Tasks and Audit filters sit behind a disclosure: a ``<details>`` whose summary
says how many filters are active, rendered open when any is or when the form has errors, closed
otherwise; an in-place filter (htmx) updates the summary's count out of band."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db


def disclosure(html: str) -> tuple[bool, str]:
    """(open?, summary text) of the page's filter disclosure."""
    found = re.search(
        r'<details class="filter-box"( open)?>\s*<summary>(.*?)</summary>', html, re.S
    )
    assert found, "no filter disclosure"
    return bool(found.group(1)), " ".join(re.sub(r"<[^>]+>", " ", found.group(2)).split())


def test_the_tasks_filters_are_closed_unfiltered_and_open_saying_how_many_are_active(
    client_for, make_task
):
    make_task("alice")
    olga = client_for("olga")
    assert disclosure(olga.get(reverse("dashboard:tasks")).content.decode()) == (
        False,
        "Search and filters",
    )
    # The order is not a filter; the tenant the switcher already scopes to is not one either.
    plain = olga.get(reverse("dashboard:tasks"), {"sort": "created", "tenant": "acme", "q": " "})
    assert disclosure(plain.content.decode()) == (False, "Search and filters")
    filtered = olga.get(
        reverse("dashboard:tasks"), {"q": "checkout", "state": "queued", "tenant": ""}
    )
    assert disclosure(filtered.content.decode()) == (True, "Search and filters (3 active)")


def test_the_tasks_filters_open_on_an_error_so_the_field_is_in_view(client_for):
    page = client_for("olga").get(reverse("dashboard:tasks"), {"error_code": "oops"})
    assert disclosure(page.content.decode())[0] is True


def test_an_in_place_filter_updates_the_summarys_count_out_of_band(client_for, make_task):
    make_task("alice")
    swap = client_for("olga").get(
        reverse("dashboard:tasks"),
        {"state": "queued"},
        headers={"HX-Request": "true", "HX-Target": "task-results"},
    )
    html = swap.content.decode()
    assert 'id="task-results"' in html and "<details" not in html
    assert re.search(r'<span id="task-filter-state"[^>]*hx-swap-oob="true"[^>]*>\(1 active\)', html)


def test_the_audit_filters_are_closed_unfiltered_and_open_when_filtered(client_for):
    olga = client_for("olga")
    assert disclosure(olga.get(reverse("dashboard:audit")).content.decode()) == (False, "Filters")
    filtered = olga.get(reverse("dashboard:audit"), {"action": "task.created"})
    assert disclosure(filtered.content.decode()) == (True, "Filters (1 active)")
