"""The dashboard's Destinations page: admins create, edit, disable and delete; operators read
the delivery log and redeliver dead letters; members and auditors are refused; another
tenant's destination is a 404; the secret is never rendered; a task's page lists its
notifications."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from audit.record import Actor
from mcptasks.models import Delivery, DeliveryState, Destination
from mcptasks.outbox import destinations
from mcptasks.runner import run_task

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def plain_http(settings: Any) -> None:
    settings.SECURE_SSL_REDIRECT = False


@pytest.fixture
def browser(users: dict[str, Any]) -> Any:
    def login(name: str) -> Client:
        client = Client()
        client.force_login(users[name])
        return client

    return login


def form(receiver_url: str, secret: str, users: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "name": "ops hooks",
        "kind": "webhook",
        "config": f'{{"url": "{receiver_url}"}}',
        "secret": secret,
        "events": ["task.created", "audit"],
        "owner": str(users["amy"].pk),
        "enabled": "on",
        **extra,
    }


def test_an_admin_creates_a_destination_and_never_sees_its_secret_again(
    browser, receiver, secret, users
):
    amy = browser("amy")
    created = amy.post("/destinations/", form(receiver.url, secret, users))
    assert created.status_code == 302, created.content.decode()[:2000]
    destination = Destination.objects.get()
    page = amy.get(created["Location"])
    assert page.status_code == 200
    html = page.content.decode()
    assert "ops hooks" in html and "secret set" in html
    assert secret not in html and secret.split("_", 1)[1][:12] not in html
    assert secret not in amy.get("/destinations/").content.decode()
    assert destination.events == ["task.created", "audit"]


def test_a_refused_config_names_the_field_and_does_not_echo_the_secret(browser, secret, users):
    amy = browser("amy")
    answer = amy.post("/destinations/", form("http://example.com/hook", secret, users))
    assert answer.status_code == 422
    html = answer.content.decode()
    assert "url: Must use https://" in html
    assert secret not in html
    assert not Destination.objects.exists()


def test_an_admin_edits_disables_and_deletes(browser, webhook, users, secret, receiver):
    hook = webhook()
    amy = browser("amy")
    data = form(receiver.url, "", users, name="renamed")
    data.pop("enabled")  # unticked: disabled
    saved = amy.post(f"/destinations/{hook.pk}/", data)
    assert saved.status_code == 302, saved.content.decode()[:2000]
    hook.refresh_from_db()
    assert hook.name == "renamed" and hook.enabled is False and hook.has_secret
    assert amy.post(f"/destinations/{hook.pk}/delete").status_code == 302
    assert not Destination.objects.exists()


@pytest.mark.parametrize("who", ["alice", "carl"])
def test_members_and_auditors_are_refused(browser, webhook, who, receiver, secret, users):
    hook = webhook()
    client = browser(who)
    assert client.get("/destinations/").status_code == 403
    assert client.post("/destinations/", form(receiver.url, secret, users)).status_code == 403
    assert client.get(f"/destinations/{hook.pk}/").status_code == 404
    assert client.post(f"/destinations/{hook.pk}/delete").status_code == 404
    assert "Destinations</a>" not in client.get("/tasks/").content.decode()
    assert Destination.objects.count() == 1


def test_another_tenants_destination_is_not_found(browser, cast, receiver, secret):
    olga = cast["olga"]["user"]
    theirs = destinations.create(
        tenant=cast["bob"]["tenant"],
        actor=Actor.for_user(olga),
        created_by=olga,
        name="globex",
        kind="webhook",
        config={"url": receiver.url},
        secret=secret,
        events=["task.created"],
    )
    amy = browser("amy")
    assert amy.get(f"/destinations/{theirs.pk}/").status_code == 404
    assert amy.post(f"/destinations/{theirs.pk}/delete").status_code == 404
    assert "globex" not in amy.get("/destinations/").content.decode()


def test_an_operator_sees_the_log_and_redelivers_a_dead_letter(
    browser, webhook, make_task, run_jobs, receiver
):
    hook = webhook(events=["task.created"])
    receiver.status = 404
    make_task()
    run_jobs()
    dead = Delivery.objects.get()
    assert dead.state == DeliveryState.DEAD
    olga = browser("olga")
    page = olga.get(f"/destinations/{hook.pk}/").content.decode()
    assert "Redeliver" in page and "the receiver answered HTTP 404" in page
    assert "Save</button>" not in page  # operators do not edit
    assert olga.post(f"/destinations/{hook.pk}/", {"name": "x"}).status_code == 403
    receiver.status = 204
    answer = olga.post(f"/destinations/{hook.pk}/deliveries/{dead.pk}/redeliver")
    assert answer.status_code == 302
    run_jobs()
    dead.refresh_from_db()
    assert dead.state == DeliveryState.DELIVERED
    assert (
        browser("alice").post(f"/destinations/{hook.pk}/deliveries/{dead.pk}/redeliver").status_code
        == 404
    )


def test_the_task_page_lists_its_notifications(browser, webhook, make_task, run_jobs):
    webhook(events=["task.created", "task.completed"])
    task = make_task()
    run_jobs()
    run_task(task.pk)
    run_jobs()
    page = browser("alice").get(f"/tasks/{task.pk}/").content.decode()
    assert "Notifications" in page
    assert 'data-notification="task.created" data-state="delivered"' in page
    assert 'data-notification="task.completed" data-state="delivered"' in page
