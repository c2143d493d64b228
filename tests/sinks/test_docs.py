"""docs/destinations.md matches the code: each kind's config fields and the CEF table."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from mcptasks.sinks import syslog

DOC = (Path(__file__).resolve().parents[2] / "docs" / "destinations.md").read_text()
KINDS = ("splunk_hec", "syslog", "jsonl_file", "email", "slack")


def section(kind: str) -> str:
    return DOC.split(f"(`{kind}`)\n", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("kind", KINDS)
def test_each_kinds_config_fields_are_documented(kind: str) -> None:
    fields_table = section(kind).split("| field |", 1)[1].split("\n\n", 1)[0]
    documented = re.findall(r"^\| `([a-z_]+)` \|", fields_table, flags=re.MULTILINE)
    module = importlib.import_module(f"mcptasks.sinks.{kind}")
    assert documented == list(module.FIELDS)


def test_the_cef_table_is_the_codes() -> None:
    rows = re.findall(
        r"^\| `([a-z_.]+)` \| (\d+) \| ([^|]+) \| (\d+) \| (\d+) \|$", DOC, flags=re.MULTILINE
    )
    assert [
        (action, number, name.strip(), int(severity), int(level))
        for action, number, name, severity, level in rows
    ] == [
        (
            action,
            event.signature_id,
            event.name,
            event.severity,
            syslog.syslog_severity(event.severity),
        )
        for action, event in syslog.CEF_EVENTS.items()
    ]
