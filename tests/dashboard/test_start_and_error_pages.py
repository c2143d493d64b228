"""Each role starts where its work is; 404 and 500 pages are the product's own, in debug too."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db

START = {
    "alice": "/tasks/",  # member: her tasks
    "adam": "/tasks/",
    "bob": "/tasks/",
    "amy": "/tasks/",  # tenant admin: the tenant's tasks
    "olga": "/inbox/",  # operator: the inbox
    "carl": "/audit/",  # auditor: the audit trail
}
DEBUG_404_MARKERS = ("URLconf", "Django tried these URL patterns", "technical_404")


@pytest.mark.parametrize(("name", "start"), sorted(START.items()))
def test_each_role_lands_on_its_work_after_login(cast: Any, name: str, start: str) -> None:
    client = Client()
    response = client.post(
        reverse("dashboard:login"),
        {"username": name, "password": cast[name]["password"]},
        follow=True,
    )
    assert [url for url, _ in response.redirect_chain] == ["/", start]
    assert response.status_code == 200


@pytest.mark.parametrize(("name", "start"), sorted(START.items()))
def test_the_root_sends_each_role_to_its_work(client_for: Any, name: str, start: str) -> None:
    response = client_for(name).get("/")
    assert response.status_code == 302
    assert response["Location"] == start


def test_the_root_asks_a_stranger_to_sign_in(db: Any) -> None:
    response = Client().get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_the_inbox_stays_reachable_for_members(client_for: Any) -> None:
    assert client_for("alice").get(reverse("dashboard:inbox")).status_code == 200


def assert_product_404(response: Any) -> None:
    assert response.status_code == 404
    html = response.content.decode()
    assert "There is nothing here, or nothing you may see." in html
    for marker in DEBUG_404_MARKERS:
        assert marker not in html


@pytest.mark.parametrize("debug", [False, True], ids=["production", "debug"])
def test_an_unknown_url_shows_the_product_404_not_the_url_patterns(
    settings: Any, client_for: Any, debug: bool
) -> None:
    settings.DEBUG = debug
    assert_product_404(Client().get("/no/such/page/"))
    assert_product_404(client_for("alice").get("/no/such/page/"))


@pytest.mark.parametrize("debug", [False, True], ids=["production", "debug"])
def test_a_view_404_shows_the_product_page(settings: Any, client_for: Any, debug: bool) -> None:
    settings.DEBUG = debug
    assert_product_404(client_for("alice").get("/tasks/no-such-task/"))


def test_the_slash_redirect_still_applies_in_debug(settings: Any, client_for: Any) -> None:
    settings.DEBUG = True
    response = client_for("alice").get("/tasks")
    assert response.status_code == 301
    assert response["Location"] == "/tasks/"


def test_an_unknown_api_path_in_debug_is_a_problem(settings: Any, client_for: Any) -> None:
    settings.DEBUG = True
    response = client_for("alice").get("/api/v2/nothing")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/problem+json"


def test_a_server_error_shows_the_product_500_page(settings: Any, db: Any) -> None:
    settings.DEBUG = False
    settings.ROOT_URLCONF = "tests.dashboard.failing_urls"
    client = Client(raise_request_exception=False)
    response = client.get("/fail")
    assert response.status_code == 500
    assert "Something went wrong" in response.content.decode()
    api = client.get("/api/v1/fail")
    assert api.status_code == 500
    assert api["Content-Type"] == "application/problem+json"
    assert api.json()["status"] == 500


def test_a_member_with_a_question_waiting_starts_on_the_inbox(
    client_for: Any, awaiting: Any
) -> None:
    from mcptasks.models import Audience

    awaiting("alice", audience=Audience.ANY, forbid_self_approval=False)
    assert client_for("alice").get("/")["Location"] == "/inbox/"
    assert client_for("adam").get("/")["Location"] == "/tasks/"  # nothing waits for him
