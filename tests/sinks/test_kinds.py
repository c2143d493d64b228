"""Across the kinds: each is found by module, and none adds a secret to what it is handed — the
security tests' secret corpus, redacted as the outbox redacts, never reaches a receiver."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core import mail

from audit.redact import redact, redact_text
from mcptasks import sinks
from mcptasks.sinks import Message
from tests.security import corpus
from tests.sinks.conftest import (
    WHEN,
    HttpReceiver,
    SyslogReceiver,
    approval_message,
    audit_message,
    wait_for,
)

MINE = {"splunk_hec", "syslog", "jsonl_file", "email", "slack"}


def test_the_five_kinds_are_found_with_a_label_and_a_batch_size() -> None:
    found = sinks.sinks()
    assert set(found) >= MINE
    for kind in MINE:
        sink = sinks.get(kind)
        assert sink.kind == kind
        assert sink.label
        assert sink.max_batch >= 1
        assert (sink.secret_label is not None) == sink.secret_required


def corpus_messages() -> tuple[corpus.Corpus, list[Message]]:
    secrets = corpus.build()
    # The tool of the corpus declares deploy_pin sensitive; the outbox redacts with that.
    data = redact(
        {"payload": secrets.payload, "prose": secrets.prose, "deploy_pin": secrets.deploy_pin},
        sensitive_keys={"deploy_pin"},
    )
    audit = audit_message("task.created", arguments=data, note=redact_text(secrets.prose))
    approval = approval_message(arguments=data)
    task = Message(
        id="evt-task-1",
        type="task.failed",
        timestamp=WHEN,
        tenant="acme",
        data={"id": "t-1", "tool": "deploy", "status": "failed", "error": data},
    )
    return secrets, [audit, approval, task]


def test_no_secret_of_the_redacted_corpus_reaches_any_receiver(
    http_receivers: Callable[..., HttpReceiver],
    syslog_receivers: Callable[..., SyslogReceiver],
    settings: Any,
    tmp_path: Path,
) -> None:
    secrets, messages = corpus_messages()
    seen: list[tuple[str, str]] = []

    hec = http_receivers(lambda request: (200, b'{"text":"Success","code":0}'))
    slack = http_receivers(lambda request: (200, b"ok"))
    for layout in ("json", "ocsf"):
        config = sinks.get("splunk_hec").clean_config({"url": hec.url, "format": layout})
        sinks.get("splunk_hec").send(config, "hec-token", messages, timeout=5)
    for message in messages:
        sinks.get("slack").send({}, slack.url + "/services/T/B/x", [message], timeout=5)
    seen += [("hec", request.body.decode()) for request in hec.requests]
    seen += [("slack", request.body.decode()) for request in slack.requests]

    collector = syslog_receivers()
    for layout in ("cef", "json", "ocsf"):
        config = sinks.get("syslog").clean_config(
            {"host": "127.0.0.1", "port": collector.port, "tls": False, "format": layout}
        )
        sinks.get("syslog").send(config, None, messages, timeout=5)
    wait_for(lambda: len(collector.messages) == 9)
    seen += [("syslog", payload.decode()) for payload in collector.messages]

    settings.MCPTASKS_SINKS_DIR = tmp_path
    for layout in ("json", "ocsf"):
        config = sinks.get("jsonl_file").clean_config({"path": f"{layout}.jsonl", "format": layout})
        sinks.get("jsonl_file").send(config, None, messages, timeout=5)
        seen.append(("jsonl", (tmp_path / f"{layout}.jsonl").read_text()))

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    config = sinks.get("email").clean_config({"to": ["ops@example.com"], "to_reviewers": True})
    sinks.get("email").send(config, None, messages, timeout=5)
    seen += [("email", sent.message().as_string()) for sent in mail.outbox]

    assert len(seen) >= 10
    for where, text in seen:
        # JSON escapes would hide a secret with a quote or a line break in it: look at both.
        for form in (text, json.dumps(text)):
            assert secrets.hits(form) == [], where


@pytest.mark.parametrize("kind", sorted(MINE))
def test_a_config_that_is_not_an_object_is_refused(kind: str) -> None:
    with pytest.raises(sinks.ConfigError) as caught:
        sinks.get(kind).clean_config(["not", "an", "object"])  # type: ignore[arg-type]
    assert caught.value.field == "config"


def test_no_log_record_carries_a_secret(
    http_receivers: Callable[..., HttpReceiver], caplog: pytest.LogCaptureFixture
) -> None:
    # The levels settings.LOGGING sets (httpx would log each request's URL at INFO).
    hec = http_receivers(lambda request: (403, b'{"text":"Invalid token","code":4}'))
    slack = http_receivers(lambda request: (500, b"oops"))
    webhook_url = slack.url + "/services/T0/B0/hook-secret-path-0123456789"
    with pytest.raises(sinks.DeliveryError):
        sinks.get("slack").send({}, webhook_url, [approval_message()], timeout=5)
    config = sinks.get("splunk_hec").clean_config({"url": hec.url})
    with pytest.raises(sinks.DeliveryError):
        sinks.get("splunk_hec").send(config, "hec-token-secret-0123", [audit_message()], timeout=5)
    assert "hook-secret-path" not in caplog.text
    assert "hec-token-secret" not in caplog.text


@pytest.mark.parametrize(
    ("kind", "config"),
    [
        ("splunk_hec", {"url": "https://splunk.example.com:8088/", "index": "main"}),
        ("syslog", {"host": "::1", "facility": "authpriv", "format": "json"}),
        ("jsonl_file", {"path": "./acme//audit.jsonl"}),
        ("email", {"to": "a@example.com, b@example.com", "to_reviewers": True}),
        ("slack", {"mention": "<!here>"}),
    ],
)
def test_a_cleaned_config_cleans_to_itself(kind: str, config: dict[str, Any]) -> None:
    # The outbox stores the cleaned config; each send checks it again.
    cleaned = sinks.get(kind).clean_config(config)
    assert sinks.get(kind).clean_config(cleaned) == cleaned
    assert json.loads(json.dumps(cleaned)) == cleaned  # storable as JSON
