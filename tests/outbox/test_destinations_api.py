"""The REST API of destinations (/api/v1/destinations): admins manage, operators read and
redeliver, members and auditors are refused, another tenant's destination is a 404, and the
secret is write-only — never in an answer, the OpenAPI examples, a log or the audit trail."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from audit.models import AuditEvent
from audit.record import Actor
from mcptasks.models import ApiToken, Delivery, DeliveryState, Destination
from mcptasks.outbox import crypto, destinations

pytestmark = pytest.mark.django_db(transaction=True)
PATH = "/api/v1/destinations"


@pytest.fixture(autouse=True)
def plain_http(settings: Any) -> None:
    settings.SECURE_SSL_REDIRECT = False


@pytest.fixture
def api(cast: dict[str, dict[str, Any]]) -> Any:
    def for_member(name: str) -> APIClient:
        entry = cast[name]
        _, token = ApiToken.issue(user=entry["user"], tenant=entry["tenant"], scopes=["api"])
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        return client

    return for_member


def body(receiver_url: str, secret: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": "ci hooks",
        "kind": "webhook",
        "config": {"url": receiver_url},
        "secret": secret,
        "events": ["task.created", "task.completed"],
        **extra,
    }


def test_an_admin_creates_a_destination_and_the_secret_is_never_returned(
    api, receiver, secret, caplog
):
    created = api("amy").post(PATH, body(receiver.url, secret), format="json")
    assert created.status_code == 201, created.content
    assert created.json()["has_secret"] is True
    listed = api("amy").get(PATH)
    one = api("amy").get(f"{PATH}/{created.json()['id']}")
    log = api("amy").get(f"{PATH}/{created.json()['id']}/deliveries")
    for answer in (created, listed, one, log):
        assert answer.status_code == 200 or answer.status_code == 201
        assert secret not in answer.content.decode()
        assert secret.split("_", 1)[1][:12] not in answer.content.decode()
    stored = Destination.objects.get()
    assert secret not in stored.secret_encrypted  # encrypted at rest
    assert crypto.decrypt(stored.secret_encrypted) == secret
    audit = AuditEvent.objects.get(action="destination.created")
    assert audit.data["secret_changed"] is True
    assert secret not in json.dumps(audit.data)
    assert secret not in caplog.text
    assert one.json()["owner"] == "amy" and one.json()["tenant"] == "acme"


def test_changing_the_secret_is_audited_as_secret_changed_only(api, receiver, secret):
    created = api("amy").post(PATH, body(receiver.url, secret), format="json").json()
    new = "whsec_" + "QUJD" * 8
    changed = api("amy").patch(
        f"{PATH}/{created['id']}", {"secret": new, "enabled": False}, format="json"
    )
    assert changed.status_code == 200, changed.content
    assert changed.json()["enabled"] is False and new not in changed.content.decode()
    audit = AuditEvent.objects.get(action="destination.changed")
    assert audit.data["secret_changed"] is True and audit.data["changed"] == ["enabled"]
    assert new not in json.dumps(audit.data)
    assert crypto.decrypt(Destination.objects.get().secret_encrypted) == new


@pytest.mark.parametrize("who", ["alice", "carl", "olga"])
def test_members_auditors_and_operators_may_not_create(api, receiver, secret, who):
    answer = api(who).post(PATH, body(receiver.url, secret), format="json")
    assert answer.status_code == 403, answer.content
    assert "admins" in answer.json()["detail"]
    assert Destination.objects.count() == 0


@pytest.mark.parametrize("who", ["alice", "carl"])
def test_members_and_auditors_may_not_list_or_read(api, webhook, who):
    hook = webhook()
    assert api(who).get(PATH).status_code == 403
    assert api(who).get(f"{PATH}/{hook.pk}").status_code == 404
    assert api(who).get(f"{PATH}/{hook.pk}/deliveries").status_code == 404
    assert api(who).delete(f"{PATH}/{hook.pk}").status_code == 404


def test_an_operator_reads_but_may_not_change_or_delete(api, webhook):
    hook = webhook()
    assert api("olga").get(f"{PATH}/{hook.pk}").status_code == 200
    assert (
        api("olga").patch(f"{PATH}/{hook.pk}", {"enabled": False}, format="json").status_code == 403
    )
    assert api("olga").delete(f"{PATH}/{hook.pk}").status_code == 403
    assert Destination.objects.get().enabled is True


def test_another_tenants_destination_is_not_found(api, cast, receiver, secret):
    olga = cast["olga"]["user"]
    globex = cast["bob"]["tenant"]
    theirs = destinations.create(
        tenant=globex,
        actor=Actor.for_user(olga),
        created_by=olga,
        name="globex hooks",
        kind="webhook",
        config={"url": receiver.url},
        secret=secret,
        events=["task.created"],
    )
    for answer in (
        api("amy").get(f"{PATH}/{theirs.pk}"),
        api("amy").patch(f"{PATH}/{theirs.pk}", {"enabled": False}, format="json"),
        api("amy").delete(f"{PATH}/{theirs.pk}"),
        api("amy").get(f"{PATH}/{theirs.pk}/deliveries"),
    ):
        assert answer.status_code == 404
    assert [d["name"] for d in api("amy").get(PATH).json()] == []
    created = api("amy").post(PATH, body(receiver.url, secret, tenant="globex"), format="json")
    assert created.status_code == 404


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"config": {"url": "ftp://example.com/x"}}, "url"),
        ({"config": {"url": "http://example.com/x"}}, "url"),
        ({"config": {"url": "https://example.com/x", "verify": False}}, "verify"),
        ({"config": {}}, "url"),
        ({"secret": "not-a-whsec"}, "secret"),
        ({"secret": ""}, "secret"),
        ({"kind": "carrier-pigeon"}, "kind"),
    ],
)
def test_a_config_the_sink_refuses_is_a_400_naming_the_field(api, receiver, secret, change, field):
    answer = api("amy").post(PATH, {**body(receiver.url, secret), **change}, format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["errors"]
    assert Destination.objects.count() == 0


def test_bad_input_is_a_4xx_never_a_500(api, receiver, secret):
    for bad in (
        {**body(receiver.url, secret), "events": ["task.exploded"]},
        {**body(receiver.url, secret), "config": "https://x"},
        {**body(receiver.url, secret), "owner": "nobody"},
        [],
    ):
        answer = api("amy").post(PATH, bad, format="json")
        assert 400 <= answer.status_code < 500, answer.content
    assert api("amy").get(f"{PATH}/999999").status_code == 404
    assert api("amy").get(f"{PATH}/deliveries").status_code == 404


def test_an_operator_redelivers_a_dead_letter(api, webhook, make_task, run_jobs, receiver):
    hook = webhook(events=["task.created"])
    receiver.status = 400
    make_task()
    run_jobs()
    dead = Delivery.objects.get()
    assert dead.state == DeliveryState.DEAD
    log = api("olga").get(f"{PATH}/{hook.pk}/deliveries", {"state": "dead"}).json()
    assert [d["id"] for d in log] == [dead.pk]
    receiver.status = 204
    path = f"{PATH}/{hook.pk}/deliveries/{dead.pk}/redeliver"
    assert api("alice").post(path).status_code == 404
    answer = api("olga").post(path)
    assert answer.status_code == 200, answer.content
    run_jobs()
    dead.refresh_from_db()
    assert dead.state == DeliveryState.DELIVERED
    assert api("olga").post(path).status_code == 409


def test_an_admin_deletes_a_destination(api, webhook):
    hook = webhook()
    assert api("amy").delete(f"{PATH}/{hook.pk}").status_code == 204
    assert not Destination.objects.exists()
    assert AuditEvent.objects.filter(action="destination.deleted").count() == 1


def test_the_destinations_api_is_in_the_openapi_schema(api):
    schema = api("amy").get("/api/schema/", {"format": "json"})
    paths = json.loads(schema.content)["paths"]
    assert "/api/v1/destinations" in paths
    assert "/api/v1/destinations/{destination_id}/deliveries/{delivery_id}/redeliver" in paths
