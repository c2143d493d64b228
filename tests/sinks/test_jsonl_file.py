"""JSONL file destinations: one line per message under the sinks directory, nowhere else."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from audit import ocsf
from mcptasks.sinks import ConfigError, DeliveryError, get
from tests.sinks.conftest import approval_message, audit_message

SINK = get("jsonl_file")


@pytest.fixture
def sinks_dir(settings: Any, tmp_path: Path) -> Path:
    settings.MCPTASKS_SINKS_DIR = tmp_path / "sinks"
    return tmp_path / "sinks"


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_batches_append_one_json_line_per_message_in_order(sinks_dir: Path) -> None:
    config = SINK.clean_config({"path": "acme/audit.jsonl"})
    SINK.send(config, None, [audit_message(seq=1), audit_message(seq=2)], timeout=5)
    SINK.send(config, None, [audit_message(seq=3), approval_message()], timeout=5)
    written = lines(sinks_dir / "acme" / "audit.jsonl")
    assert [line["id"] for line in written] == [
        "audit:tenant:acme:1",
        "audit:tenant:acme:2",
        "audit:tenant:acme:3",
        "evt-approval-1",
    ]
    assert [line["data"]["sequence"] for line in written[:3]] == [1, 2, 3]
    assert written[0]["data"]["hash"] == "b" * 64
    assert written[3]["url"].endswith("/answer/approve/")
    assert (sinks_dir / "acme" / "audit.jsonl").read_text().endswith("\n")


def test_ocsf_format_writes_audit_events_as_ocsf(sinks_dir: Path) -> None:
    config = SINK.clean_config({"path": "ocsf.jsonl", "format": "ocsf"})
    SINK.send(config, None, [audit_message("token.issued", owner="alice")], timeout=5)
    (line,) = lines(sinks_dir / "ocsf.jsonl")
    assert line["class_uid"] == 3001
    assert ocsf.missing_required(line) == []


def test_a_symlink_leading_out_of_the_sinks_directory_is_refused(
    sinks_dir: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    sinks_dir.mkdir()
    (sinks_dir / "escape").symlink_to(outside)
    with pytest.raises(DeliveryError) as caught:
        SINK.send(SINK.clean_config({"path": "escape/x.jsonl"}), None, [audit_message()], timeout=5)
    assert caught.value.retryable is False
    assert "out of the sinks directory" in caught.value.reason
    assert list(outside.iterdir()) == []


def test_a_directory_in_the_files_place_is_a_permanent_failure(sinks_dir: Path) -> None:
    (sinks_dir / "taken.jsonl").mkdir(parents=True)
    with pytest.raises(DeliveryError) as caught:
        SINK.send(SINK.clean_config({"path": "taken.jsonl"}), None, [audit_message()], timeout=5)
    assert caught.value.retryable is False
    assert caught.value.reason.startswith("taken.jsonl: ")


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({}, "path"),
        ({"path": ""}, "path"),
        ({"path": "/var/log/audit.jsonl"}, "path"),
        ({"path": "../audit.jsonl"}, "path"),
        ({"path": "acme/../../audit.jsonl"}, "path"),
        ({"path": "acme/"}, "path"),
        ({"path": "."}, "path"),
        ({"path": ".hidden.jsonl"}, "path"),
        ({"path": "a\\b.jsonl"}, "path"),
        ({"path": "a\x00b"}, "path"),
        ({"path": ["a"]}, "path"),
        ({"path": "a.jsonl", "format": "cef"}, "format"),
        ({"path": "a.jsonl", "mode": "0600"}, "mode"),
    ],
)
def test_each_bad_field_is_named(config: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        SINK.clean_config(config)
    assert caught.value.field == field


def test_the_default_sinks_directory_is_under_the_var_dir() -> None:
    from django.conf import settings

    assert Path(settings.MCPTASKS_SINKS_DIR) == Path(settings.VAR_DIR) / "sinks"
