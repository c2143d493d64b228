"""Signed, chained digests anchor the chains outside the database (docs/audit.md, "Digests")."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from audit import digests, signing
from audit.chain import ROW_FIELDS, body_of_row, link_hash, verify_chain
from audit.export import ExportFilters, export_to_file, manifest_path_for
from audit.models import AuditDigest, AuditEvent, ChainHead
from audit.record import Actor

pytestmark = pytest.mark.django_db
ACME = "tenant:acme"
TEN = datetime(2026, 12, 1, 10, 0, 3, tzinfo=UTC)
ELEVEN = datetime(2026, 12, 1, 11, 0, 2, tzinfo=UTC)


@pytest.fixture(autouse=True)
def digest_dir(settings: Any, tmp_path: Path) -> Path:
    """A private digest storage per test (a local directory, as on the embedded default)."""
    location = tmp_path / "digests"
    settings.STORAGES = {
        **settings.STORAGES,
        "audit_digests": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(location)},
        },
    }
    return location


def run(command: str, *args: str) -> tuple[bool, str]:
    out = io.StringIO()
    try:
        call_command(command, *args, stdout=out)
    except CommandError as exc:
        return False, out.getvalue() + str(exc)
    return True, out.getvalue()


def rewrite_consistently(tamper: Callable[[], Any], chain: str, seq: int, **changes: Any) -> None:
    """Alter one event and recompute every later hash and the head: what an attacker with
    write access to the database would do so that verify_audit still passes."""
    with tamper():
        AuditEvent.objects.filter(chain=chain, seq=seq).update(**changes)
        rows = AuditEvent.objects.filter(chain=chain, seq__gte=seq).order_by("seq")
        prev = AuditEvent.objects.get(chain=chain, seq=seq - 1).hash if seq > 1 else "0" * 64
        for row in rows.values_list("pk", *ROW_FIELDS):
            new_hash = link_hash(prev, body_of_row(row[1:]))
            AuditEvent.objects.filter(pk=row[0]).update(prev_hash=prev, hash=new_hash)
            prev = new_hash
        ChainHead.objects.filter(chain=chain).update(hash=prev)


def test_digests_are_written_signed_and_chained(
    record_events: Callable[..., Any], digest_dir: Path
) -> None:
    record_events(3)
    record_events(2, tenant=None)
    first = digests.write_digests(now=TEN)
    assert {ACME, "system"} <= {w.chain for w in first}
    assert digests.write_digests(now=ELEVEN) == []  # heads did not move: nothing new
    events = record_events(2)
    second = digests.write_digests(now=ELEVEN)
    head = events[-1].seq
    assert [(w.chain, w.head_seq) for w in second] == [(ACME, head)]
    files = sorted((digest_dir / "tenant" / "acme").iterdir())
    assert [f.name for f in files] == [
        f"20261201T100003Z-{head - 2:012d}.json",
        f"20261201T110002Z-{head:012d}.json",
    ]
    older, newer = (json.loads(f.read_text()) for f in files)
    assert newer["head"] == {"seq": 5, "hash": events[-1].hash}
    assert newer["previous_digest"]["name"] == "tenant/acme/" + files[0].name
    assert (
        newer["previous_digest"]["sha256"] == AuditDigest.objects.get(number=1, chain=ACME).sha256
    )
    assert older["previous_digest"] is None
    key = digests.digest_key()
    assert signing.check_signature(newer, {key.key_id: key.public_key_b64}) == key.key_id
    ok, out = run("verify_audit", "--digests")
    assert ok and "ok      tenant:acme: 2 digests" in out


def test_consistent_rewrite_after_a_digest_fails_naming_the_hour(
    record_events: Callable[..., Any], tamper: Callable[[], Any]
) -> None:
    first = record_events(4)[-1].seq
    digests.write_digests(now=TEN)
    second = record_events(3)[-1].seq
    digests.write_digests(now=ELEVEN)
    rewrite_consistently(tamper, ACME, second - 1, actor_display="mallory")
    assert verify_chain(ACME).ok  # the chain alone cannot see it
    assert run("verify_audit")[0]
    ok, out = run("verify_audit", "--digests")
    assert not ok
    assert "the digest of 2026-12-01T11:00Z" in out
    assert f"events after seq {first} up to {second} were rewritten after 2026-12-01T11:00Z" in out
    assert "2026-12-01T10:00Z" not in out  # the earlier hour still holds


def test_a_rewrite_before_the_first_digest_names_the_first_hour(
    record_events: Callable[..., Any], tamper: Callable[[], Any]
) -> None:
    first = record_events(4)[-1].seq
    digests.write_digests(now=TEN)
    record_events(1)
    digests.write_digests(now=ELEVEN)
    rewrite_consistently(tamper, ACME, first - 2, data={"index": 99})
    ok, out = run("verify_audit", "--digests", "--tenant", "acme")
    assert not ok
    assert "the digest of 2026-12-01T10:00Z" in out and f"after seq 0 up to {first}" in out


def test_a_deleted_digest_file_breaks_the_chain_of_digests(
    record_events: Callable[..., Any], digest_dir: Path
) -> None:
    for hour in (9, 10, 11):
        record_events(1)
        digests.write_digests(now=TEN.replace(hour=hour))
    middle = sorted((digest_dir / "tenant" / "acme").iterdir())[1]
    middle.unlink()
    ok, out = run("verify_audit", "--digests")
    assert not ok
    assert "a digest was deleted or added" in out
    assert f"digest tenant/acme/{middle.name}: the file is missing" in out


def test_deleting_the_newest_digest_file_is_detected(
    record_events: Callable[..., Any], digest_dir: Path
) -> None:
    for hour in (10, 11):
        record_events(1)
        digests.write_digests(now=TEN.replace(hour=hour))
    newest = sorted((digest_dir / "tenant" / "acme").iterdir())[-1]
    newest.unlink()
    ok, out = run("verify_audit", "--digests")
    assert not ok and "the file is missing from the digest storage" in out


def test_a_tampered_digest_file_is_detected(
    record_events: Callable[..., Any], digest_dir: Path
) -> None:
    for hour in (10, 11):
        record_events(1)
        digests.write_digests(now=TEN.replace(hour=hour))
    first = sorted((digest_dir / "tenant" / "acme").iterdir())[0]
    document = json.loads(first.read_text())
    document["head"]["seq"] = 99
    first.write_text(json.dumps(document))
    ok, out = run("verify_audit", "--digests")
    assert not ok
    assert "does not verify (the signature does not match" in out
    assert "was altered" in out  # the next digest no longer links to it


def test_verify_export_with_digests_catches_an_export_of_a_rewritten_trail(
    record_events: Callable[..., Any], tamper: Callable[[], Any], tmp_path: Path
) -> None:
    last = record_events(4)[-1].seq
    digests.write_digests(now=TEN)
    out = tmp_path / "acme.jsonl"

    def export() -> str:
        with out.open("wb") as stream:
            manifest = export_to_file(
                ExportFilters(chain=ACME), "jsonl", stream, actor=Actor.system("test")
            )
        manifest_path_for(out).write_text(json.dumps(manifest))
        return str(manifest_path_for(out))

    manifest = export()
    assert run("verify_export", str(out), manifest, "--digests")[0]
    rewrite_consistently(tamper, ACME, last - 1, task_id="forged")
    manifest = export()  # an export made after the rewrite agrees with the database...
    assert run("verify_export", str(out), manifest)[0]
    ok, text = run("verify_export", str(out), manifest, "--digests")
    assert not ok  # ...but not with the digest of 10:00
    assert f"tenant:acme seq {last}: the digest of 2026-12-01T10:00Z" in text


def test_a_chain_deleted_from_the_database_is_still_checked_against_its_digests(
    record_events: Callable[..., Any], tamper: Callable[[], Any]
) -> None:
    record_events(2, tenant="globex")
    digests.write_digests(now=TEN)
    with tamper():
        AuditEvent.objects.filter(chain="tenant:globex").delete()
        ChainHead.objects.filter(chain="tenant:globex").delete()
        AuditDigest.objects.filter(chain="tenant:globex").delete()
    assert "tenant:globex" in digests.digest_chains()
    ok, out = run("verify_audit", "--digests")
    assert not ok and "tenant:globex: the digest of 2026-12-01T10:00Z" in out
    assert "the stored event is gone" in out


def test_the_digest_job_writes_through_the_configured_storage(
    record_events: Callable[..., Any], digest_dir: Path
) -> None:
    from mcptasks import jobs

    record_events(2)
    assert jobs.write_audit_digests.run() >= 1
    assert len(list((digest_dir / "tenant" / "acme").iterdir())) == 1


def test_beat_schedules_the_digest_job_at_the_configured_interval() -> None:
    from django.conf import settings

    from mcptasks import jobs

    entry = settings.CELERY_BEAT_SCHEDULE["audit-digests"]
    assert entry["task"] == jobs.write_audit_digests.name
    assert entry["schedule"] == settings.MCPTASKS_AUDIT_DIGEST_INTERVAL_S


def test_digests_of_events_purged_by_retention_are_noted_not_failed(
    record_events: Callable[..., Any],
) -> None:
    import time_machine
    from django.utils import timezone

    from audit.retention import purge_tenant

    with time_machine.travel(timezone.now() - timedelta(days=40), tick=False):
        record_events(3)
        digests.write_digests(now=TEN)  # attests seq 3, which the purge deletes
        record_events(1)  # purged too: the checkpoint
    record_events(1)
    purge_tenant(tenant_slug="acme", older_than_days=30, actor=Actor.system("test"))
    digests.write_digests(now=ELEVEN)
    ok, out = run("verify_audit", "--digests", "--tenant", "acme")
    assert ok, out
    assert "note    tenant:acme: 1 digests attest events purged by retention" in out
