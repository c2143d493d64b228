"""Exports: streamed, filtered, signed; verify_export catches any change to file or manifest."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import time_machine
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from audit import signing
from audit.export import ExportFilters, ExportStream, export_to_file, verify_export
from audit.models import AuditEvent
from audit.record import Actor

pytestmark = pytest.mark.django_db
ACME = "tenant:acme"


def export(filters: ExportFilters, fmt: str = "jsonl") -> tuple[bytes, dict[str, Any]]:
    out = io.BytesIO()
    manifest = export_to_file(filters, fmt, out, actor=Actor.system("test"))
    return out.getvalue(), manifest


def check(content: bytes, manifest: dict[str, Any], **options: Any) -> Any:
    return verify_export(io.BytesIO(content), manifest, **options)


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_an_export_verifies_and_holds_the_events_as_stored(
    fmt: str, record_events: Callable[..., Any]
) -> None:
    events = record_events(5, tenant="acme")
    record_events(2, tenant="globex")
    content, manifest = export(ExportFilters(chain=ACME), fmt)
    result = check(content, manifest)
    assert result.ok, result.problems
    assert result.count == 5 and manifest["count"] == 5
    assert manifest["chains"] == {ACME: {"first_seq": 1, "last_seq": 5, "count": 5}}
    assert manifest["chain_heads"] == {ACME: {"seq": 5, "hash": events[-1].hash}}
    assert manifest["format"] == fmt and manifest["filters"]["chain"] == ACME
    if fmt == "jsonl":
        first = json.loads(content.splitlines()[0])
        assert first["data"] == events[0].data and first["hash"] == events[0].hash
    else:
        assert content.startswith(b"chain,seq,created_at,")


def test_every_export_is_audited_in_the_exported_tenants_chain(
    record_events: Callable[..., Any],
) -> None:
    record_events(3, tenant="acme")
    _, manifest = export(ExportFilters(chain=ACME, action="task.created"))
    event = AuditEvent.objects.get(chain=ACME, action="audit.exported")
    assert event.data["filters"]["action"] == "task.created" and event.data["count"] == 3
    assert event.data["content_sha256"] == manifest["content_sha256"]
    assert event.data["key_id"] == manifest["signing"]["key_id"]
    assert manifest["export_event"] == {"chain": ACME, "seq": event.seq, "hash": event.hash}


def test_an_export_of_every_chain_is_audited_in_system(record_events: Callable[..., Any]) -> None:
    record_events(2, tenant="acme")
    record_events(2, tenant="globex")
    content, manifest = export(ExportFilters(), "csv")
    assert manifest["count"] == 4 and set(manifest["chains"]) == {ACME, "tenant:globex"}
    assert AuditEvent.objects.filter(chain="system", action="audit.exported").count() == 1
    assert check(content, manifest).ok


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
@pytest.mark.parametrize("where", [0.1, 0.5, 0.97])
def test_an_export_edited_by_one_byte_does_not_verify(
    fmt: str, where: float, record_events: Callable[..., Any]
) -> None:
    record_events(6)
    content, manifest = export(ExportFilters(chain=ACME), fmt)
    position = int(len(content) * where)
    edited = bytearray(content)
    # A different printable byte that keeps the line structure, so parsing still runs.
    edited[position] = ord("7") if edited[position] != ord("7") else ord("8")
    result = check(bytes(edited), manifest)
    assert not result.ok
    assert any(problem.startswith("content:") for problem in result.problems)


def test_an_edited_row_is_named(record_events: Callable[..., Any]) -> None:
    record_events(4)
    content, manifest = export(ExportFilters(chain=ACME))
    lines = content.splitlines(keepends=True)
    lines[2] = lines[2].replace(b'"event 2"', b'"event X"')
    result = check(b"".join(lines), manifest)
    assert f"{ACME} seq 3: content does not match its hash" in result.problems


def test_a_dropped_row_does_not_verify(record_events: Callable[..., Any]) -> None:
    record_events(4)
    content, manifest = export(ExportFilters(chain=ACME))
    lines = content.splitlines(keepends=True)
    result = check(b"".join(lines[:1] + lines[2:]), manifest)
    assert not result.ok
    assert any("count: the file holds 3 events" in problem for problem in result.problems)


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m.__setitem__("count", m["count"] - 1),
        lambda m: m["filters"].__setitem__("action", "task.failed"),
        lambda m: m.__setitem__("content_sha256", "0" * 64),
        lambda m: m["chain_heads"][ACME].__setitem__("seq", 1),
        lambda m: m.__setitem__("signature", m["signature"][:-4] + "AAA="),
    ],
)
def test_an_edited_manifest_does_not_verify(
    edit: Callable[[dict[str, Any]], None], record_events: Callable[..., Any]
) -> None:
    record_events(3)
    content, manifest = export(ExportFilters(chain=ACME))
    edited = json.loads(json.dumps(manifest))
    edit(edited)
    result = check(content, edited)
    assert not result.ok and result.problems[0].startswith("signature:")


def test_a_manifest_signed_by_another_key_needs_that_key_trusted(
    record_events: Callable[..., Any],
) -> None:
    record_events(3)
    content, manifest = export(ExportFilters(chain=ACME))
    other = signing.derive_key("an attacker's key, or last year's")
    resigned = signing.sign(
        {k: v for k, v in manifest.items() if k not in ("signing", "signature")}, other
    )
    assert resigned["signing"]["key_id"] != manifest["signing"]["key_id"]
    refused = check(content, resigned)
    assert not refused.ok and "not a trusted signing key" in refused.problems[0]
    trusted = {**signing.trusted_public_keys(), other.key_id: other.public_key_b64}
    assert check(content, resigned, trusted_keys=trusted).ok


def test_signing_key_is_derived_deterministically_and_rotates_with_the_setting(
    settings: Any,
) -> None:
    first = signing.current_key()
    assert signing.current_key().key_id == first.key_id
    settings.AUDIT_SIGNING_KEY = "a rotated signing secret"
    rotated = signing.current_key()
    assert rotated.key_id != first.key_id
    settings.MCPTASKS_AUDIT_TRUSTED_PUBLIC_KEYS = [first.public_key_b64]
    assert set(signing.trusted_public_keys()) == {first.key_id, rotated.key_id}


def test_an_event_changed_in_the_database_after_export_does_not_verify(
    record_events: Callable[..., Any], tamper: Callable[[], Any]
) -> None:
    record_events(4)
    content, manifest = export(ExportFilters(chain=ACME))
    with tamper():
        AuditEvent.objects.filter(chain=ACME, seq=2).update(actor_display="mallory")
    result = check(content, manifest)
    assert f"{ACME} seq 2: the stored event differs (actor_display)" in result.problems


def test_filters_select_actor_action_task_and_time_range(record_events: Callable[..., Any]) -> None:
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        record_events(2, actor="alice", action="task.created", task_id="t-1")
    with time_machine.travel(start + timedelta(hours=1), tick=False):
        record_events(2, actor="adam", action="task.failed", task_id="t-2")
    with time_machine.travel(start + timedelta(hours=2), tick=False):
        record_events(1, actor="alice", action="task.failed", task_id="t-3")

    def seqs(**filters: Any) -> list[int]:
        content, manifest = export(ExportFilters(chain=ACME, **filters))
        assert check(content, manifest).ok
        return [json.loads(line)["seq"] for line in content.splitlines()]

    assert seqs(actor="adam") == [3, 4]
    assert seqs(actor=str(AuditEvent.objects.get(chain=ACME, seq=1).actor_id)) == [1, 2, 5]
    assert seqs(action="task.failed") == [3, 4, 5]
    assert seqs(task_id="t-3") == [5]
    assert seqs(since=start + timedelta(minutes=30), until=start + timedelta(hours=2)) == [3, 4]


def test_the_stream_yields_chunk_by_chunk_and_stops_at_the_heads_it_started_with(
    record_events: Callable[..., Any],
) -> None:
    record_events(7)
    stream = ExportStream(filters=ExportFilters(chain=ACME), format="jsonl", chunk_rows=3)
    record_events(2)  # written after the export began: not in it, as the heads say
    chunks = iter(stream)
    assert next(chunks).count(b"\n") == 3 and stream.count == 3
    assert [chunk.count(b"\n") for chunk in chunks] == [3, 1]
    assert stream.count == 7 and stream.heads[ACME]["seq"] == 7


def test_export_commands_write_file_and_manifest_that_verify(
    tmp_path: Path, record_events: Callable[..., Any], users: dict[str, Any]
) -> None:
    record_events(3)
    out = tmp_path / "acme.csv"
    call_command(
        "export_audit",
        "--format",
        "csv",
        "--out",
        str(out),
        "--tenant",
        "acme",
        "--as",
        "carl",
        stdout=io.StringIO(),
    )
    manifest_path = tmp_path / "acme.csv.manifest.json"
    assert json.loads(manifest_path.read_text())["count"] == 3
    exported = AuditEvent.objects.get(action="audit.exported")
    assert (exported.chain, exported.actor_display) == (ACME, "carl")
    output = io.StringIO()
    call_command("verify_export", str(out), str(manifest_path), stdout=output)
    assert "export verified: 3 events" in output.getvalue()
    out.write_bytes(out.read_bytes().replace(b"event 1", b"event 9"))
    output = io.StringIO()
    with pytest.raises(CommandError):
        call_command("verify_export", str(out), str(manifest_path), stdout=output)
    assert "FAIL    content:" in output.getvalue()


def test_verify_export_accepts_a_retired_key_given_on_the_command_line(
    tmp_path: Path, record_events: Callable[..., Any], settings: Any
) -> None:
    record_events(2)
    out = tmp_path / "acme.jsonl"
    call_command(
        "export_audit",
        "--format",
        "jsonl",
        "--out",
        str(out),
        "--chain",
        ACME,
        stdout=io.StringIO(),
    )
    manifest_path = Path(f"{out}.manifest.json")
    old_public_key = json.loads(manifest_path.read_text())["signing"]["public_key"]
    settings.AUDIT_SIGNING_KEY = "rotated"
    with pytest.raises(CommandError):
        call_command("verify_export", str(out), str(manifest_path), stdout=io.StringIO())
    call_command(
        "verify_export",
        str(out),
        str(manifest_path),
        "--public-key",
        old_public_key,
        stdout=io.StringIO(),
    )


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_times_are_exported_exactly_as_hashed_with_or_without_microseconds(
    fmt: str, record_events: Callable[..., Any]
) -> None:
    whole_second = timezone.now().replace(microsecond=0) - timedelta(days=1)
    for moment in (
        whole_second,
        whole_second.replace(microsecond=5),
        whole_second.replace(microsecond=120000),
    ):
        with time_machine.travel(moment, tick=False):
            record_events(1)
    expected = [
        event.created_at.isoformat()
        for event in AuditEvent.objects.filter(chain=ACME).order_by("seq")
    ]
    assert "." not in expected[0] and expected[1].endswith(".000005+00:00")
    content, manifest = export(ExportFilters(chain=ACME), fmt)
    for stamp in expected:
        assert stamp.encode() in content
    assert check(content, manifest).ok


def test_csv_cells_that_a_spreadsheet_would_run_as_formulas_are_neutralised() -> None:
    """OWASP's CSV-injection rule: =, +, -, @, tab, CR get a leading apostrophe; the export
    still verifies (the reader drops exactly that apostrophe)."""
    from audit.record import record

    names = ["=cmd|' /C calc'!A0", "+SUM(1)", "-2+3", "@HYPERLINK(x)", "\tx", "'=already"]
    for name in names:
        record(
            action="auth.login_failed",
            actor=Actor(kind="anonymous", display=name),
            tenant_id=None,
            tenant_slug=None,
        )
    content, manifest = export(ExportFilters(chain="system"), "csv")
    assert check(content, manifest).ok
    import csv

    rows = list(csv.reader(io.StringIO(content.decode())))
    displays = [row[6] for row in rows[1:] if row[7] == "auth.login_failed"]
    assert displays == ["'" + name for name in names]
    for display in displays:
        assert display[0] not in "=+-@\t\r"
