"""Syslog destinations: RFC 5424 messages in RFC 6587 octet-counted frames over TCP and TLS to a
real local collector; CEF renderings (header, extension, escaping) and the action table."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings
from hypothesis import given
from hypothesis import strategies as st

from audit import ocsf
from mcptasks import queries
from mcptasks.sinks import ConfigError, DeliveryError, Message, get
from mcptasks.sinks import syslog as syslog_sink
from tests.audit.test_coverage import REQUIRED, table_actions
from tests.sinks.conftest import (
    WHEN,
    Certificate,
    SyslogReceiver,
    approval_message,
    audit_message,
    audit_row,
    free_port,
    make_certificate,
    wait_for,
)

SINK = get("syslog")
RFC5424 = re.compile(
    rb"<(?P<pri>\d{1,3})>(?P<version>1) (?P<timestamp>\S+) (?P<hostname>\S{1,255}) "
    rb"(?P<app>\S{1,48}) (?P<procid>\S{1,128}) (?P<msgid>\S{1,32}) (?P<sd>-|\[.*?\]) (?P<msg>.*)",
    re.DOTALL,
)
TASK_EVENT_TYPES = (
    "task.created",
    "task.status_changed",
    "task.input_requested",
    "approval.requested",
    "approval.decided",
    "task.completed",
    "task.failed",
    "task.cancelled",
)


# ---------------------------------------------------------------- a CEF reader (the receiver's)


def _unescape(raw: str, *, header: bool) -> str:
    out, index = [], 0
    while index < len(raw):
        char = raw[index]
        if char == "\\" and index + 1 < len(raw):
            following = raw[index + 1]
            if header:
                assert following in "\\|", f"bad header escape \\{following}"
                out.append(following)
            else:
                assert following in "\\=nr", f"bad extension escape \\{following}"
                out.append({"n": "\n", "r": "\r"}.get(following, following))
            index += 2
            continue
        assert header or char != "=", "an unescaped = inside a value"
        out.append(char)
        index += 1
    return "".join(out)


def parse_cef(line: str) -> tuple[list[str], dict[str, str]]:
    """The seven header fields and the extension of one CEF line, unescaped."""
    assert "\n" not in line and "\r" not in line
    fields, current, index = [], [], 0
    while len(fields) < 7:
        char = line[index]
        if char == "\\":
            current.append(line[index : index + 2])
            index += 2
            continue
        if char == "|":
            fields.append(_unescape("".join(current), header=True))
            current = []
        else:
            current.append(char)
        index += 1
    extension = line[index:]
    equals = []
    position = 0
    while position < len(extension):
        if extension[position] == "\\":
            position += 2
            continue
        if extension[position] == "=":
            equals.append(position)
        position += 1
    values: dict[str, str] = {}
    for number, at in enumerate(equals):
        key = extension[extension.rfind(" ", 0, at) + 1 : at]
        assert re.fullmatch(r"[A-Za-z0-9]+", key), key
        end = extension.rfind(" ", 0, equals[number + 1]) if number + 1 < len(equals) else None
        values[key] = _unescape(extension[at + 1 : end], header=False)
    return fields, values


def parse_5424(payload: bytes) -> dict[str, Any]:
    match = RFC5424.fullmatch(payload)
    assert match, payload[:200]
    return {name: value.decode() for name, value in match.groupdict().items()}


def render(message: Message) -> tuple[list[str], dict[str, str]]:
    return parse_cef(syslog_sink.cef(message, host="mcp-1.example.com"))


# ---------------------------------------------------------------- the action table


def test_every_audit_action_and_task_event_type_has_a_cef_signature() -> None:
    actions = (
        set(table_actions())
        | set(ocsf.MAPPING)
        | set(queries.AUDIT_ACTIONS)
        | REQUIRED
        | set(TASK_EVENT_TYPES)
    )
    missing = actions - set(syslog_sink.CEF_EVENTS)
    assert not missing, missing
    ids = [event.signature_id for event in syslog_sink.CEF_EVENTS.values()]
    assert len(ids) == len(set(ids)), "signature ids are unique"
    assert syslog_sink.CEF_OTHER.signature_id not in ids
    for action, event in syslog_sink.CEF_EVENTS.items():
        assert 0 <= event.severity <= 10, action
        assert event.name and "|" not in event.name, action


def test_an_action_added_later_is_sent_under_its_own_name_not_dropped() -> None:
    header, extension = render(audit_message("widget.frobbed"))
    assert header[4] == syslog_sink.CEF_OTHER.signature_id
    assert header[5] == "widget.frobbed"
    assert extension["act"] == "widget.frobbed"


# ---------------------------------------------------------------- CEF rendering


def test_cef_of_an_audit_event_carries_header_and_chain_fields() -> None:
    message = audit_message(
        "auth.login_failed", seq=41, ip="203.0.113.9", user_agent="curl/8.1", failures=10
    )
    header, extension = render(message)
    assert header == [
        "CEF:0",
        "mcptasks",
        "mcptasks",
        settings.MCPTASKS_VERSION,
        "402",
        "Login failed",
        "6",
    ]
    assert extension["rt"] == str(int(WHEN.timestamp() * 1000))
    assert extension["externalId"] == message.id
    assert extension["act"] == "auth.login_failed"
    assert extension["cat"] == "audit.event"
    assert extension["suser"] == "amy"
    assert extension["suid"] == "3"
    assert extension["src"] == "203.0.113.9"
    assert extension["requestClientApplication"] == "curl/8.1"
    assert extension["outcome"] == "failure"
    assert extension["dvchost"] == "mcp-1.example.com"
    labels = {
        extension[f"{key}Label"]: extension[key]
        for key in ("cs1", "cs2", "cs3", "cs4", "cs5", "cs6", "cn1")
    }
    assert labels == {
        "chain": "tenant:acme",
        "hash": "b" * 64,
        "prevHash": "a" * 64,
        "taskId": "t-123",
        "tenant": "acme",
        "requestId": "req-1",
        "seq": "41",
    }
    assert json.loads(extension["msg"]) == {
        "ip": "203.0.113.9",
        "user_agent": "curl/8.1",
        "failures": 10,
    }


def test_cef_of_a_task_event_names_its_type_task_and_link() -> None:
    header, extension = render(approval_message())
    assert header[4:7] == ["300", "Approval requested", "4"]
    assert extension["act"] == "approval.requested"
    assert extension["cs4"] == "t-9"
    assert extension["request"] == "https://mcp.example.com/dashboard/tasks/t-9/answer/approve/"
    assert "chain" not in extension.values()


def test_cef_escapes_pipes_backslashes_equals_and_line_breaks_and_reads_back_the_same() -> None:
    tricky = "a|b\\c=d\ne\r\nf = g\\=h|"
    message = audit_message("legal|hold\\odd", actor=tricky, note=tricky)
    message = Message(
        id="evt=1|x",
        type=message.type,
        timestamp=message.timestamp,
        tenant="ac=me|\\",
        data=message.data,
    )
    line = syslog_sink.cef(message, host="h")
    header, extension = parse_cef(line)
    assert header[5] == "legal|hold\\odd"  # an unknown action's name, header-escaped
    assert extension["suser"] == tricky
    assert extension["externalId"] == "evt=1|x"
    assert extension["cs5"] == "ac=me|\\"
    assert json.loads(extension["msg"]) == {"note": tricky}


def test_a_flat_stored_row_is_read_as_well_as_the_outboxs_nested_event() -> None:
    flat = Message(
        id="x", type="audit.event", timestamp=WHEN, tenant="acme", data=audit_row("auth.logout", 9)
    )
    nested = audit_message("auth.logout", 9)
    assert (
        render(flat)[0]
        == render(nested)[0]
        == [
            "CEF:0",
            "mcptasks",
            "mcptasks",
            settings.MCPTASKS_VERSION,
            "401",
            "Logout",
            "2",
        ]
    )
    flat_extension, nested_extension = render(flat)[1], render(nested)[1]
    assert flat_extension.pop("externalId") == "x"
    nested_extension.pop("externalId")
    assert flat_extension == nested_extension
    assert flat_extension["cn1"] == "9" and flat_extension["cs2"] == "b" * 64


def test_a_custom_fields_label_is_left_out_with_its_empty_value() -> None:
    message = audit_message("auth.logout")
    body = {**message.data["event"], "request_id": "", "task_id": ""}
    _, extension = render(
        Message(
            id="x",
            type="audit.event",
            timestamp=WHEN,
            tenant="acme",
            data={**message.data, "event": body},
        )
    )
    assert "cs6" not in extension and "cs6Label" not in extension
    assert "cs4" not in extension and "cs4Label" not in extension
    assert extension["cs1Label"] == "chain"


def test_a_line_break_in_a_header_field_becomes_a_space() -> None:
    assert syslog_sink.cef_header("two\nlines\r\nhere|x\\") == "two lines here\\|x\\\\"


@given(st.text())
def test_any_extension_value_round_trips(value: str) -> None:
    _, extension = parse_cef(f"CEF:0|v|p|1|1|n|1|msg={syslog_sink.cef_value(value)} act=x")
    assert extension == {"msg": value, "act": "x"}


@given(st.text(alphabet=st.characters(blacklist_characters="\r\n")))
def test_any_header_value_round_trips(value: str) -> None:
    header, _ = parse_cef(f"CEF:0|{syslog_sink.cef_header(value)}|p|1|1|n|1|act=x")
    assert header[1] == value


def test_a_long_data_payload_is_capped_in_msg() -> None:
    _, extension = render(audit_message("task.created", arguments={"blob": "x" * 10_000}))
    assert len(extension["msg"]) == syslog_sink.CEF_MSG_MAX
    assert extension["msg"].endswith("…")


# ---------------------------------------------------------------- over the wire


def tcp_config(receiver: SyslogReceiver, **extra: Any) -> dict[str, Any]:
    return SINK.clean_config(
        {"host": "127.0.0.1", "port": receiver.port, "tls": False, "hostname": "mcp-1", **extra}
    )


def test_an_audit_stream_arrives_over_tcp_octet_counted_in_chain_order(
    syslog_receivers: Callable[..., SyslogReceiver],
) -> None:
    receiver = syslog_receivers()
    config = tcp_config(receiver, facility="authpriv", app_name="mcptasks-audit")
    batch = [audit_message("task.created", seq=seq) for seq in range(1, 6)]
    batch.append(audit_message("effect.unknown", seq=6, actor="zoë ünïcode"))
    SINK.send(config, None, batch[:3], timeout=5)
    SINK.send(config, None, batch[3:], timeout=5)
    wait_for(lambda: len(receiver.messages) == 6)
    assert receiver.errors == []
    assert receiver.connections == 2
    parsed = [parse_5424(payload) for payload in receiver.messages]
    for fields, message in zip(parsed, batch, strict=True):
        action = message.data["event"]["action"]
        severity = syslog_sink.syslog_severity(syslog_sink.CEF_EVENTS[action].severity)
        assert int(fields["pri"]) == 10 * 8 + severity  # authpriv
        assert fields["version"] == "1"
        assert fields["timestamp"] == "2026-12-01T10:15:30.250000Z"
        assert fields["hostname"] == "mcp-1"
        assert fields["app"] == "mcptasks-audit"
        assert fields["procid"].isdigit()
        assert fields["msgid"] == action
        assert fields["sd"] == "-"
        assert fields["msg"].startswith("CEF:0|mcptasks|mcptasks|")
    sequences = [int(parse_cef(fields["msg"])[1]["cn1"]) for fields in parsed]
    assert sequences == [1, 2, 3, 4, 5, 6]  # a gap would show here
    assert parse_cef(parsed[5]["msg"])[1]["suser"] == "zoë ünïcode"
    # effect.unknown (CEF 7) is a warning; task.created (CEF 3) informational
    assert int(parsed[5]["pri"]) % 8 == 4
    assert int(parsed[0]["pri"]) % 8 == 6


def test_json_and_ocsf_bodies(syslog_receivers: Callable[..., SyslogReceiver]) -> None:
    receiver = syslog_receivers()
    SINK.send(tcp_config(receiver, format="json"), None, [audit_message(seq=3)], timeout=5)
    SINK.send(tcp_config(receiver, format="ocsf"), None, [audit_message(seq=4)], timeout=5)
    SINK.send(tcp_config(receiver, format="ocsf"), None, [approval_message()], timeout=5)
    wait_for(lambda: len(receiver.messages) == 3)
    as_json, as_ocsf, task_event = (
        json.loads(parse_5424(payload)["msg"]) for payload in receiver.messages
    )
    assert as_json["id"] == "audit:tenant:acme:3"
    assert as_json["type"] == "audit.event"
    assert as_json["data"]["sequence"] == 3
    assert as_json["timestamp"] == "2026-12-01T10:15:30.250000Z"
    assert as_ocsf["class_uid"] == 6003
    assert ocsf.missing_required(as_ocsf) == []
    assert as_ocsf["metadata"]["sequence"] == 4
    assert as_ocsf["metadata"]["event_id"] == "audit:tenant:acme:4"
    # A task event has no OCSF class of its own: it keeps the envelope.
    assert task_event["type"] == "approval.requested"
    assert task_event["url"].endswith("/answer/approve/")


def test_tls_with_the_collectors_ca_bundle(
    syslog_receivers: Callable[..., SyslogReceiver], certificate: Certificate
) -> None:
    receiver = syslog_receivers(tls=certificate)
    config = SINK.clean_config(
        {"host": "127.0.0.1", "port": receiver.port, "ca_bundle": certificate.cert.name}
    )
    assert config["tls"] is True
    SINK.send(config, None, [audit_message(seq=1), audit_message(seq=2)], timeout=5)
    wait_for(lambda: len(receiver.messages) == 2)
    assert [parse_5424(payload)["msgid"] for payload in receiver.messages] == ["task.created"] * 2


def test_a_certificate_the_trust_store_refuses_is_not_retried(
    syslog_receivers: Callable[..., SyslogReceiver], certificate: Certificate, tmp_path: Any
) -> None:
    receiver = syslog_receivers(tls=certificate)
    (tmp_path / "other").mkdir()
    other = make_certificate(tmp_path / "other")
    for config in (
        {"host": "127.0.0.1", "port": receiver.port},  # the system's CAs
        {
            "host": "127.0.0.1",
            "port": receiver.port,
            "ca_bundle": str(other.cert.relative_to(tmp_path)),
        },
    ):
        with pytest.raises(DeliveryError) as caught:
            SINK.send(SINK.clean_config(config), None, [audit_message()], timeout=5)
        assert caught.value.retryable is False
        assert "certificate refused" in caught.value.reason
    assert receiver.messages == []


def test_a_collector_that_is_down_is_a_retryable_failure() -> None:
    port = free_port()
    config = SINK.clean_config({"host": "127.0.0.1", "port": port, "tls": False})
    with pytest.raises(DeliveryError) as caught:
        SINK.send(config, None, [audit_message()], timeout=2)
    assert caught.value.retryable is True
    assert f"127.0.0.1:{port}" in caught.value.reason
    assert "refused" in caught.value.reason.lower()


# ---------------------------------------------------------------- config


def test_defaults() -> None:
    assert SINK.clean_config({"host": "siem.example.com"}) == {
        "host": "siem.example.com",
        "port": 6514,
        "tls": True,
        "app_name": "mcptasks",
        "facility": 16,
        "format": "cef",
    }
    assert SINK.clean_config({"host": "::1", "tls": False})["port"] == 514
    assert SINK.secret_required is False


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({}, "host"),
        ({"host": ""}, "host"),
        ({"host": "bad host"}, "host"),
        ({"host": "-x.example.com"}, "host"),
        ({"host": 5}, "host"),
        ({"host": "h", "port": 0}, "port"),
        ({"host": "h", "port": 70000}, "port"),
        ({"host": "h", "port": "514"}, "port"),
        ({"host": "h", "port": True}, "port"),
        ({"host": "h", "tls": "yes"}, "tls"),
        ({"host": "h", "facility": "nope"}, "facility"),
        ({"host": "h", "facility": 24}, "facility"),
        ({"host": "h", "format": "leef"}, "format"),
        ({"host": "h", "app_name": "two words"}, "app_name"),
        ({"host": "h", "app_name": "x" * 49}, "app_name"),
        ({"host": "h", "hostname": "a b"}, "hostname"),
        ({"host": "h", "ca_bundle": "missing.pem"}, "ca_bundle"),
        ({"host": "h", "ca_bundle": "/etc/ssl/certs/ca-certificates.crt"}, "ca_bundle"),
        ({"host": "h", "ca_bundle": "../etc/passwd"}, "ca_bundle"),
        ({"host": "h", "colour": "blue"}, "colour"),
    ],
)
def test_each_bad_field_is_named(config: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        SINK.clean_config(config)
    assert caught.value.field == field


def test_a_ca_bundle_that_holds_no_certificate_is_refused(tmp_path: Any, settings: Any) -> None:
    settings.MCPTASKS_SINKS_CA_DIR = tmp_path
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    with pytest.raises(ConfigError) as caught:
        SINK.clean_config({"host": "h", "ca_bundle": "junk.pem"})
    assert caught.value.field == "ca_bundle"
    assert caught.value.message == "holds no PEM certificate"


def test_a_ca_bundle_is_only_for_tls(certificate: Certificate) -> None:
    with pytest.raises(ConfigError) as caught:
        SINK.clean_config({"host": "h", "tls": False, "ca_bundle": certificate.cert.name})
    assert (caught.value.field, caught.value.message) == ("ca_bundle", "only applies with tls on")


def test_a_ca_bundle_cannot_name_a_file_outside_the_ca_directory(
    tmp_path: Any, settings: Any
) -> None:
    ca_dir = tmp_path / "ca"
    ca_dir.mkdir()
    settings.MCPTASKS_SINKS_CA_DIR = ca_dir
    outside = make_certificate(tmp_path)
    (ca_dir / "link.crt").symlink_to(outside.cert)
    with pytest.raises(ConfigError) as caught:
        SINK.clean_config({"host": "h", "ca_bundle": "link.crt"})
    assert caught.value.message == "is not a readable file in the CA directory"
