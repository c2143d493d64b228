"""The preferences page: a time zone kept on the server that every page writes times in,
over the browser's; bad input is a 400 that saves nothing."""

from __future__ import annotations

import pytest
from django.urls import reverse

from dashboard.models import Preference
from dashboard.pages import TIME_ZONE_COOKIE

pytestmark = pytest.mark.django_db


def test_the_user_menu_links_to_the_preferences_page_which_offers_every_zone(cast, client_for):
    olga = client_for("olga")
    html = olga.get(reverse("dashboard:tasks")).content.decode()
    assert f'class="whoami" href="{reverse("dashboard:preferences")}"' in html
    page = olga.get(reverse("dashboard:preferences"))
    assert page.status_code == 200
    text = page.content.decode()
    assert '<option value="" selected>Browser&#x27;s time zone' in text
    assert '<option value="Asia/Tokyo">Asia/Tokyo</option>' in text
    assert '<option value="UTC">UTC</option>' in text
    assert 'for="id_time_zone"' in text  # the control is labelled


def test_a_chosen_zone_is_saved_and_written_on_every_list_and_page_over_the_browsers(
    cast, client_for, make_task
):
    task = make_task("alice")
    olga = client_for("olga")
    olga.cookies[TIME_ZONE_COOKIE] = "America/Sao_Paulo"  # what the browser says
    saved = olga.post(reverse("dashboard:preferences"), {"time_zone": "Asia/Tokyo"})
    assert saved.status_code == 302
    assert Preference.objects.get(user=cast["olga"]["user"]).time_zone == "Asia/Tokyo"
    from audit.models import AuditEvent

    event = AuditEvent.objects.filter(task_id=task.pk).order_by("pk").first()
    for url in (
        reverse("dashboard:tasks"),
        reverse("dashboard:task", args=[task.pk]),
        reverse("dashboard:audit") + "?tenant=acme",
        reverse("dashboard:audit_event", args=[event.chain, event.seq]),
        reverse("dashboard:inbox"),
        reverse("dashboard:tokens"),
    ):
        html = olga.get(url).content.decode()
        assert 'data-tz="Asia/Tokyo" data-tz-profile' in html, url
        assert "-03:00</span>" not in html, url
    lists = olga.get(reverse("dashboard:tasks")).content.decode()
    assert "+09:00</span>" in lists
    # Live fragments (a list row, the task's live sections) are written in it too.
    row = olga.get(reverse("dashboard:task_row", args=[task.pk])).content.decode()
    assert "+09:00</span>" in row
    # Back to the browser's zone: the cookie counts again, and the script may rewrite times.
    olga.post(reverse("dashboard:preferences"), {"time_zone": ""})
    html = olga.get(reverse("dashboard:tasks")).content.decode()
    assert "-03:00</span>" in html and "data-tz-profile" not in html


def test_the_setting_is_the_users_own_and_follows_them_to_another_browser(
    cast, client_for, make_task, users
):
    from django.test import Client

    make_task("alice")
    client_for("alice").post(reverse("dashboard:preferences"), {"time_zone": "Asia/Kolkata"})
    other_browser = Client()
    other_browser.force_login(users["alice"])
    assert "+05:30</span>" in other_browser.get(reverse("dashboard:tasks")).content.decode()
    olga = client_for("olga")  # another user keeps the browser's (here: none → UTC)
    assert " UTC</span>" in olga.get(reverse("dashboard:tasks")).content.decode()


@pytest.mark.parametrize("bogus", ["Mars/Olympus", "../../etc/passwd", "x" * 100, "\x00"])
def test_a_zone_that_is_not_one_is_refused_with_400_and_nothing_saved(cast, client_for, bogus):
    olga = client_for("olga")
    response = olga.post(reverse("dashboard:preferences"), {"time_zone": bogus})
    assert response.status_code == 400
    assert 'aria-invalid="true"' in response.content.decode()
    assert not Preference.objects.filter(user=cast["olga"]["user"]).exists()


def test_after_saving_the_page_goes_back_only_to_a_path_on_this_site(cast, client_for):
    olga = client_for("olga")
    back = olga.post(
        reverse("dashboard:preferences"), {"time_zone": "UTC", "next": "/tasks/?state=failed"}
    )
    assert back["Location"] == "/tasks/?state=failed"
    away = olga.post(
        reverse("dashboard:preferences"), {"time_zone": "UTC", "next": "//evil.example/"}
    )
    assert away["Location"] == reverse("dashboard:preferences")


def test_signed_out_visitors_are_sent_to_sign_in(client):
    response = client.get(reverse("dashboard:preferences"))
    assert response.status_code == 302 and "/login/" in response["Location"]
