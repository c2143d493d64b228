"""Every management command refuses an unknown tenant or a bad argument with a clear message
(a CommandError: exit status 1, the message on stderr) and writes nothing."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from audit.models import AuditEvent

pytestmark = pytest.mark.django_db


def refused(*args: str) -> str:
    with pytest.raises(CommandError) as error:
        call_command(*args, stdout=io.StringIO(), stderr=io.StringIO())
    return str(error.value)


def test_export_audit_refuses_an_unknown_tenant_instead_of_an_empty_signed_export(
    cast: Any, tmp_path: Path
) -> None:
    out = tmp_path / "audit.jsonl"
    message = refused("export_audit", "--format", "jsonl", "--out", str(out), "--tenant", "acmee")
    assert "no tenant 'acmee'" in message
    assert not out.exists()
    assert not AuditEvent.objects.filter(action="audit.exported").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--chain", "tenant:acmee"], "no such chain 'tenant:acmee'"),
        (["--chain", "acme"], "no such chain 'acme'"),
        (["--since", "yesterday"], "not an ISO 8601 date or time"),
        (["--since", "2026-02-01", "--until", "2026-01-01"], "--since must be before --until"),
        (["--as", "nobody"], "no user 'nobody'"),
    ],
)
def test_export_audit_refuses_bad_arguments(
    cast: Any, tmp_path: Path, args: list[str], message: str
) -> None:
    out = tmp_path / "audit.jsonl"
    assert message in refused("export_audit", "--format", "jsonl", "--out", str(out), *args)
    assert not AuditEvent.objects.filter(action="audit.exported").exists()


def test_export_audit_refuses_an_unwritable_destination(cast: Any, tmp_path: Path) -> None:
    out = tmp_path / "missing" / "audit.jsonl"
    assert "no directory" in refused("export_audit", "--format", "csv", "--out", str(out))


def test_export_audit_of_a_known_tenant_and_of_the_system_chain_still_work(
    cast: Any, tmp_path: Path
) -> None:
    for scope in (["--tenant", "globex"], ["--chain", "system"], ["--chain", "tenant:acme"]):
        out = tmp_path / f"{scope[1].replace(':', '-')}.jsonl"
        call_command(
            "export_audit", "--format", "jsonl", "--out", str(out), *scope, stdout=io.StringIO()
        )
        assert out.exists() and Path(f"{out}.manifest.json").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["purge_audit", "--tenant", "acmee", "--older-than-days", "30"], "no tenant 'acmee'"),
        (["purge_audit", "--tenant", "acme"], "has no retention policy"),
        (["purge_audit", "--tenant", "acme", "--older-than-days", "0"], "at least one day"),
        (["purge_audit"], "one of the arguments --tenant --due is required"),
        (["verify_audit", "--tenant", "acmee"], "no such chain: tenant:acmee"),
        (["verify_export", "/nonexistent.jsonl", "/nonexistent.json"], "cannot read the manifest"),
        (["serve", "--port", "70000"], "--port must be 0-65535"),
        (["serve", "--workers", "0"], "--workers must be at least 1"),
        (["serve", "--port", "eighty"], "invalid int value"),
        (["serve", "--server", "gunicorn"], "--server must be uvicorn or daphne, got 'gunicorn'"),
        (["seed_demo", "--bogus"], "unrecognized arguments"),
        (["create_tenant"], "the following arguments are required: slug"),
    ],
)
def test_other_commands_refuse_bad_input(cast: Any, args: list[str], message: str) -> None:
    events = AuditEvent.objects.count()
    assert message in refused(*args)
    assert AuditEvent.objects.count() == events
