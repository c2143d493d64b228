"""Audit events render as OCSF 1.3 events of a fitting class, and OCSF exports still verify."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from audit import ocsf
from audit.chain import ROW_FIELDS
from audit.export import ExportFilters, export_to_file, verify_export
from audit.models import AuditEvent
from audit.record import Actor
from tests.audit.test_coverage import table_actions

pytestmark = pytest.mark.django_db


def stored(action: str, data: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    event = {
        "chain": "tenant:acme",
        "seq": 7,
        "created_at": "2026-12-01T10:15:30.250000+00:00",
        "tenant_id": 1,
        "actor_kind": "user",
        "actor_id": "3",
        "actor_display": "amy",
        "action": action,
        "task_id": "",
        "data": data or {},
        "request_id": "req-1",
        "prev_hash": "a" * 64,
        "hash": "b" * 64,
    }
    return {**event, **fields}


def test_every_documented_audit_action_maps_to_a_class_with_its_required_fields() -> None:
    actions = table_actions()
    assert set(actions) <= set(ocsf.MAPPING), set(actions) - set(ocsf.MAPPING)
    for action in actions:
        rendered = ocsf.to_ocsf(stored(action, task_id="t-1"))
        assert rendered["class_uid"] in (3001, 3002, 6003), action
        assert ocsf.missing_required(rendered) == [], action
        assert rendered["type_uid"] == rendered["class_uid"] * 100 + rendered["activity_id"]
        assert rendered["metadata"]["version"].startswith("1.")
        assert rendered["unmapped"]["mcptasks_audit"]["action"] == action


@pytest.mark.parametrize(
    ("action", "class_uid", "activity_id"),
    [
        ("auth.login", 3002, 1),
        ("auth.logout", 3002, 2),
        ("auth.login_failed", 3002, 1),
        ("token.issued", 3001, 99),
        ("membership.added", 3001, 7),
        ("delegation.revoked", 3001, 8),
        ("task.created", 6003, 1),
        ("audit.exported", 6003, 2),
        ("task.cancel_requested", 6003, 3),
        ("task.purged", 6003, 4),
    ],
)
def test_actions_get_the_class_and_activity_that_fit_them(
    action: str, class_uid: int, activity_id: int
) -> None:
    rendered = ocsf.to_ocsf(stored(action))
    assert (rendered["class_uid"], rendered["activity_id"]) == (class_uid, activity_id)


def test_an_unknown_action_renders_as_api_activity_other_not_dropped() -> None:
    rendered = ocsf.to_ocsf(stored("approval.decided", {"decision": "approve"}, task_id="t-9"))
    assert (rendered["class_uid"], rendered["activity_id"]) == (6003, 99)
    assert rendered["activity_name"] == "Other" and rendered["type_uid"] == 600399
    assert rendered["api"]["operation"] == "approval.decided"
    assert rendered["resources"] == [{"type": "task", "uid": "t-9"}]
    assert ocsf.missing_required(rendered) == []


def test_fields_carry_who_what_when_and_the_chain_position() -> None:
    failed = ocsf.to_ocsf(
        stored(
            "auth.login_failed",
            {"username": "mallory", "ip": "10.0.0.9", "user_agent": "curl/8"},
            actor_kind="anonymous",
            actor_id="",
            actor_display="",
        )
    )
    assert failed["status"] == "Failure" and failed["status_id"] == 2
    assert failed["user"] == {"name": "mallory"}
    assert failed["src_endpoint"] == {"ip": "10.0.0.9"}
    assert failed["http_request"] == {"user_agent": "curl/8"}
    assert failed["time"] == 1_796_120_130_250  # epoch milliseconds
    assert failed["metadata"]["uid"] == "tenant:acme:7" and failed["metadata"]["sequence"] == 7
    assert failed["metadata"]["correlation_uid"] == "req-1"
    granted = ocsf.to_ocsf(
        stored("delegation.granted", {"grantee": "adam", "grantee_id": 4, "delegation": "approve"})
    )
    assert granted["user"] == {"name": "adam", "uid": "4"}
    assert granted["policy"] == {"name": "approve"}
    assert granted["actor"]["user"] == {"name": "amy", "uid": "3", "type_id": 1, "type": "User"}


def test_an_ocsf_export_verifies_against_its_signed_manifest(
    record_events: Callable[..., Any], tmp_path: Path
) -> None:
    record_events(5)
    record_events(2, tenant=None, action="auth.login_failed")
    out = io.BytesIO()
    manifest = export_to_file(ExportFilters(), "ocsf", out, actor=Actor.system("test"))
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == manifest["count"] > 0
    assert all(ocsf.missing_required(line) == [] for line in lines)
    check = verify_export(io.BytesIO(out.getvalue()), manifest)
    assert check.ok, check.problems
    # The OCSF part is bound to the hashed event: changing it fails verification.
    lines[0]["actor"]["user"]["name"] = "someone else"
    forged = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    problems = verify_export(io.BytesIO(forged), manifest).problems
    assert any("the OCSF fields do not render its event" in p for p in problems)
    # and the command-line path
    path = tmp_path / "audit.ocsf.jsonl"
    call_command("export_audit", "--format", "ocsf", "--out", str(path), stdout=io.StringIO())
    call_command(
        "verify_export", str(path), f"{path}.manifest.json", stdout=io.StringIO()
    )  # raises CommandError on failure
    first = json.loads(path.read_text().splitlines()[0])
    event = first["unmapped"]["mcptasks_audit"]
    assert list(event) == list(ROW_FIELDS)
    assert AuditEvent.objects.filter(chain=event["chain"], seq=event["seq"]).exists()
