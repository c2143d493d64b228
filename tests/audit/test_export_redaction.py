"""The redaction corpus holds through exports: no secret in the bytes, and every row verifies."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest

from audit.export import ExportFilters, export_to_file, verify_export
from audit.record import Actor
from tests.audit.test_redaction import CORPUS, assert_no_secret, dumped

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_exports_of_tasks_created_with_secret_arguments_hold_no_secret(
    fmt: str, make_task: Callable[..., Any]
) -> None:
    for case in CORPUS:
        make_task(arguments={"payload": case.payload}, sensitive_keys=case.sensitive_keys)
    out = io.BytesIO()
    manifest = export_to_file(
        ExportFilters(chain="tenant:acme", action="task.created"),
        fmt,
        out,
        actor=Actor.system("test"),
    )
    assert manifest["count"] == len(CORPUS)
    text = out.getvalue().decode()
    secrets = [secret for case in CORPUS for secret in case.secrets]
    assert_no_secret(text, secrets)
    assert_no_secret(dumped(text), secrets)
    result = verify_export(io.BytesIO(out.getvalue()), manifest)
    assert result.ok, result.problems
