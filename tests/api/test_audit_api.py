"""Audit through the REST API: the events list and exports (file + signed manifest)."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from typing import Any

import pytest
from django.core import signing as django_signing
from django.utils import timezone

from audit.api import HANDLE_SALT
from audit.export import verify_export
from audit.models import AuditEvent
from tests.api.conftest import all_pages, ok, problem

pytestmark = pytest.mark.django_db
EVENTS = "/api/v1/audit/events"
EXPORTS = "/api/v1/audit/exports"


def chains(page: dict[str, Any]) -> set[str]:
    return {row["chain"] for row in page["results"]}


@pytest.fixture
def history(make_task: Any) -> dict[str, Any]:
    """A task in each tenant (each records task.created on its tenant's chain)."""
    return {"acme": make_task("alice"), "globex": make_task("bob")}


# ---------------------------------------------------------------- events list
def test_auditor_reads_both_tenants_admin_only_hers_member_none(api: Any, history: Any) -> None:
    assert chains(ok(api("carl").get(EVENTS))) == {"tenant:acme", "tenant:globex"}
    assert chains(ok(api("amy").get(EVENTS))) == {"tenant:acme"}
    assert chains(ok(api("olga").get(EVENTS))) >= {"tenant:acme", "tenant:globex"}
    for member in ("alice", "adam", "bob"):
        body = problem(api(member).get(EVENTS), 403)
        assert "audit" in body["detail"]


def test_events_carry_actor_data_and_chain_fields(api: Any, history: Any) -> None:
    task = history["acme"]
    (event,) = ok(api("carl").get(EVENTS, task=task.pk))["results"]
    stored = AuditEvent.objects.get(task_id=task.pk)
    assert event["action"] == "task.created" and event["chain"] == "tenant:acme"
    assert event["actor"] == {"kind": "principal", "id": str(task.principal_id), "display": "alice"}
    assert event["seq"] == stored.seq and event["hash"] == stored.hash
    assert event["prev_hash"] == stored.prev_hash and event["data"]["tool"] == "echo_task"


def test_events_filter_by_chain_tenant_actor_action_task_and_time(api: Any, history: Any) -> None:
    carl = api("carl")
    assert chains(ok(carl.get(EVENTS, tenant="globex"))) == {"tenant:globex"}
    assert chains(ok(carl.get(EVENTS, chain="tenant:acme"))) == {"tenant:acme"}
    assert {r["actor"]["display"] for r in ok(carl.get(EVENTS, actor="bob"))["results"]} == {"bob"}
    assert {r["action"] for r in ok(carl.get(EVENTS, action="task.created"))["results"]} == {
        "task.created"
    }
    later = (timezone.now() + timedelta(minutes=5)).isoformat()
    assert ok(carl.get(EVENTS, since=later))["results"] == []
    assert len(ok(carl.get(EVENTS, until=later))["results"]) >= 2
    problem(carl.get(EVENTS, since="last tuesday"), 422)


def test_events_page_newest_first_without_repeats(api: Any, make_task: Any) -> None:
    for _ in range(5):
        make_task("alice")
    seen = [row["id"] for row in all_pages(api("carl"), EVENTS, page_size=2)]
    assert seen == sorted(seen, reverse=True) and len(seen) == len(set(seen)) == 5


def test_system_chain_is_read_by_staff_operators_only(api: Any, history: Any) -> None:
    from audit.record import Actor, record

    record(
        action="auth.login_failed",
        actor=Actor.system("web"),
        tenant_id=None,
        tenant_slug=None,
        data={"username": "mallory"},
    )
    assert "system" in chains(ok(api("olga").get(EVENTS)))
    assert "system" not in chains(ok(api("carl").get(EVENTS)))
    assert ok(api("carl").get(EVENTS, chain="system"))["results"] == []


# ---------------------------------------------------------------- exports
def export(client: Any, body: dict[str, Any]) -> dict[str, Any]:
    created = ok(client.post(EXPORTS, body), 201)
    assert created["manifest"]["count"] == created["count"]
    return created


def download(client: Any, url: str) -> bytes:
    response = client.client.get(url)
    assert response.status_code == 200, response.status_code
    return b"".join(response.streaming_content)


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "ocsf"])
def test_auditor_exports_a_tenant_and_the_file_verifies_against_its_manifest(
    api: Any, history: Any, fmt: str
) -> None:
    carl = api("carl")
    created = export(carl, {"tenant": "globex", "format": fmt})
    manifest = created["manifest"]
    assert manifest["filters"]["chain"] == "tenant:globex" and manifest["format"] == fmt
    assert (
        created["count"]
        == AuditEvent.objects.filter(
            chain="tenant:globex", seq__lte=manifest["chain_heads"]["tenant:globex"]["seq"]
        ).count()
    )
    content = download(carl, created["file"])
    check = verify_export(io.BytesIO(content), manifest)
    assert check.ok, check.problems
    # The manifest can be fetched again, byte for byte the one returned at creation.
    assert ok(carl.client.get(created["manifest_url"])) == manifest
    exported = AuditEvent.objects.filter(action="audit.exported", chain="tenant:globex")
    assert exported.count() == 1 and exported.get().actor_display == "carl"


def test_file_stays_the_exports_snapshot_after_new_events(
    api: Any, history: Any, make_task: Any
) -> None:
    carl = api("carl")
    created = export(carl, {"tenant": "acme"})
    make_task("alice")  # a later event on the same chain
    content = download(carl, created["file"])
    assert verify_export(io.BytesIO(content), created["manifest"]).ok
    assert len(content.splitlines()) == created["count"]


def test_export_filters_reach_the_manifest_and_the_rows(api: Any, history: Any) -> None:
    carl = api("carl")
    created = export(
        carl, {"tenant": "acme", "action": "task.created", "task_id": history["acme"].pk}
    )
    rows = [json.loads(line) for line in download(carl, created["file"]).splitlines()]
    assert [(r["action"], r["task_id"]) for r in rows] == [("task.created", history["acme"].pk)]
    assert created["manifest"]["filters"]["action"] == "task.created"


def test_export_defaults_to_the_callers_tenant(api: Any, history: Any) -> None:
    created = export(api("amy"), {})
    assert created["manifest"]["filters"]["chain"] == "tenant:acme"


def test_export_rights(api: Any, history: Any) -> None:
    problem(api("alice").post(EXPORTS, {"tenant": "acme"}), 403)
    problem(api("alice").post(EXPORTS, {"tenant": "globex"}), 404)
    problem(api("amy").post(EXPORTS, {"tenant": "globex"}), 404)
    problem(api("amy").post(EXPORTS, {"tenant": "no-such-tenant"}), 404)
    problem(api("carl").post(EXPORTS, {"chain": "*"}), 403)
    problem(api("carl").post(EXPORTS, {"chain": "system"}), 403)
    everything = export(api("olga"), {"chain": "*"})
    assert set(everything["manifest"]["chain_heads"]) >= {"tenant:acme", "tenant:globex"}


@pytest.mark.parametrize(
    "body, field",
    [
        ({"format": "xml"}, "format"),
        ({"chain": "acme"}, "chain"),
        ({"chain": "tenant:acme", "tenant": "globex"}, "tenant"),
        (
            {"tenant": "acme", "since": "2030-01-01T00:00:00Z", "until": "2020-01-01T00:00:00Z"},
            "until",
        ),
    ],
)
def test_export_refuses_invalid_input(api: Any, body: dict[str, Any], field: str) -> None:
    assert field in problem(api("carl").post(EXPORTS, body), 422)["errors"]


def test_export_handles_are_the_creators_and_cannot_be_forged(api: Any, history: Any) -> None:
    created = export(api("carl"), {"tenant": "acme"})
    problem(api("olga").client.get(created["file"]), 404)
    problem(api("amy").client.get(created["manifest_url"]), 404)
    handle = created["id"]
    forged = handle[:-3] + ("AAA" if not handle.endswith("AAA") else "BBB")
    problem(api("carl").get(f"{EXPORTS}/{forged}/file"), 404)
    # A validly signed handle for a chain the caller does not read is refused too.
    payload = django_signing.loads(handle, salt=HANDLE_SALT)
    other = django_signing.dumps(
        {**payload, "user": history["acme"].principal_id}, salt=HANDLE_SALT, compress=True
    )
    problem(api("alice").get(f"{EXPORTS}/{other}/file"), 403)


@pytest.mark.django_db(transaction=True)
def test_export_file_streams_chunk_by_chunk_under_asgi(
    api: Any, history: Any, recwarn: Any
) -> None:
    """Served by the ASGI application (as in production), the file is an async stream: Django
    never reads a sync iterator whole into memory (it warns when it has to)."""
    import asyncio

    import httpx

    from mcptasks.asgi import application

    created = export(api("carl"), {"tenant": "acme"})
    path = created["file"].removeprefix("http://testserver")
    token = api("carl").client._credentials["HTTP_AUTHORIZATION"]

    async def fetch() -> httpx.Response:
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1:8000"
        ) as client:
            return await client.get(path, headers={"Authorization": token})

    response = asyncio.run(fetch())
    assert response.status_code == 200, response.text[:300]
    assert response.headers["content-type"] == "application/jsonl"
    assert verify_export(io.BytesIO(response.content), created["manifest"]).ok
    assert not [w for w in recwarn if "synchronous iterators" in str(w.message)]
