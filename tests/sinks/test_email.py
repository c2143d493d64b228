"""E-mail destinations through Django's mail backend (locmem in tests, console by default)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core import mail

from mcptasks.sinks import ConfigError, DeliveryError, Message, get
from tests.sinks.conftest import WHEN, approval_message, audit_message, free_port

SINK = get("email")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def locmem(settings: Any) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.DEFAULT_FROM_EMAIL = "mcptasks@example.com"


def test_an_approval_request_goes_to_the_reviewers_and_fixed_addresses() -> None:
    config = SINK.clean_config({"to": ["ops@example.com"], "to_reviewers": True})
    SINK.send(config, None, [approval_message()], timeout=5)
    (sent,) = mail.outbox
    assert sent.to == ["ops@example.com", "olga@example.com", "amy@example.com"]
    assert sent.from_email == "mcptasks@example.com"
    assert sent.subject == "[mcptasks] Approval requested: deploy (t-9)"
    assert sent.extra_headers["X-Mcptasks-Event-Id"] == "evt-approval-1"
    body = sent.body
    for line in (
        "Approval requested",
        "Task: t-9",
        "Tool: deploy",
        "Tenant: acme",
        "service: api",
        "version: 1.4.2",
        "environment: production",
        "Approvals required: 2",
        "Request: Deploy api 1.4.2 to production?",
        "May decide: amy, olga",
        "Open: https://mcp.example.com/dashboard/tasks/t-9/answer/approve/",
    ):
        assert line in body, line
    assert sent.content_subtype == "plain"


def test_only_named_fields_reach_the_mail_not_raw_arguments() -> None:
    message = approval_message(arguments={"api_key": "[redacted]", "notes": "rotate the db"})
    SINK.send(SINK.clean_config({"to": "ops@example.com"}), None, [message], timeout=5)
    (sent,) = mail.outbox
    assert "rotate the db" not in sent.body
    assert "arguments" not in sent.body
    assert sent.to == ["ops@example.com"]  # to_reviewers off: the reviewers are not added


def test_a_message_with_nobody_to_go_to_sends_nothing() -> None:
    config = SINK.clean_config({"to_reviewers": True})
    SINK.send(config, None, [audit_message()], timeout=5)
    assert mail.outbox == []


def test_one_mail_per_message_of_a_batch() -> None:
    config = SINK.clean_config({"to": ["a@example.com", "a@example.com", "b@example.com"]})
    assert config["to"] == ["a@example.com", "b@example.com"]
    done = Message(
        id="evt-2",
        type="task.completed",
        timestamp=WHEN,
        tenant="acme",
        data={
            "task": {"taskId": "t-9", "status": "completed"},
            "tool": "deploy",
            "outcome": "rejected",
            "dashboard_url": "https://mcp.example.com/dashboard/tasks/t-9/",
        },
    )
    SINK.send(config, None, [approval_message(), done], timeout=5)
    assert [sent.subject for sent in mail.outbox] == [
        "[mcptasks] Approval requested: deploy (t-9)",
        "[mcptasks] Task completed: deploy (t-9)",
    ]
    assert "Status: completed" in mail.outbox[1].body
    assert "Outcome: rejected" in mail.outbox[1].body
    # No url of its own: the task's page is the link.
    assert "Open: https://mcp.example.com/dashboard/tasks/t-9/" in mail.outbox[1].body


def test_a_mail_server_that_is_down_is_a_retryable_failure(settings: Any) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = free_port()
    with pytest.raises(DeliveryError) as caught:
        SINK.send(
            SINK.clean_config({"to": ["a@example.com"]}), None, [approval_message()], timeout=2
        )
    assert caught.value.retryable is True
    assert caught.value.reason.startswith("mail server: ")


def test_the_embedded_default_prints_mail_to_the_console(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "DJANGO_SETTINGS_MODULE": "mcptasks.settings",
        "MCPTASKS_VAR_DIR": str(tmp_path),
    }
    script = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.EMAIL_BACKEND); print(settings.MCPTASKS_SINKS_DIR)"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["django.core.mail.backends.console.EmailBackend", str(tmp_path / "sinks")]


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({}, "to"),
        ({"to": []}, "to"),
        ({"to_reviewers": False}, "to"),
        ({"to": "not-an-address"}, "to"),
        ({"to": ["ok@example.com", 5]}, "to"),
        ({"to": {"a": "b"}}, "to"),
        ({"to": [f"u{n}@example.com" for n in range(51)]}, "to"),
        ({"to_reviewers": "yes"}, "to_reviewers"),
        ({"to_reviewers": True, "from_email": "nope"}, "from_email"),
        ({"to_reviewers": True, "subject_prefix": "x" * 51}, "subject_prefix"),
        ({"to_reviewers": True, "subject_prefix": "a\nBcc: x@evil.example"}, "subject_prefix"),
        ({"to_reviewers": True, "cc": ["a@example.com"]}, "cc"),
    ],
)
def test_each_bad_field_is_named(config: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        SINK.clean_config(config)
    assert caught.value.field == field


def test_the_console_backend_prints_the_mail(settings: Any, capsys: Any) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
    SINK.send(SINK.clean_config({"to_reviewers": True}), None, [approval_message()], timeout=5)
    printed = capsys.readouterr().out
    assert "Subject: [mcptasks] Approval requested: deploy (t-9)" in printed
    assert "To: olga@example.com, amy@example.com" in printed
    assert mail.outbox == []
