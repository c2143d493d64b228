"""Splunk HEC destinations against a local fake HEC that checks the token and records batches."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from audit import ocsf
from mcptasks.sinks import ConfigError, DeliveryError, get
from tests.sinks.conftest import (
    WHEN,
    Certificate,
    HttpReceiver,
    Request,
    approval_message,
    audit_message,
    free_port,
)

SINK = get("splunk_hec")
TOKEN = "5f1c3a2e-8d0b-4e7a-9c61-2b7d4f0e9a13"


def batch_of(request: Request) -> list[dict[str, Any]]:
    """HEC's batch format: JSON objects one after another."""
    decoder, text, events, index = json.JSONDecoder(), request.body.decode(), [], 0
    while index < len(text):
        while index < len(text) and text[index].isspace():
            index += 1
        if index == len(text):
            break
        event, index = decoder.raw_decode(text, index)
        events.append(event)
    return events


def fake_hec(request: Request) -> tuple[int, bytes]:
    """What Splunk answers (docs: "Troubleshoot HTTP Event Collector", status codes)."""
    auth = request.headers.get("Authorization", "")
    if request.path != "/services/collector/event":
        return 404, b'{"text":"The requested URL was not found on this server.","code":404}'
    if not auth:
        return 401, b'{"text":"Token is required","code":2}'
    if auth != f"Splunk {TOKEN}":
        return 403, b'{"text":"Invalid token","code":4}'
    try:
        batch_of(request)
    except ValueError:
        return 400, b'{"text":"Invalid data format","code":6,"invalid-event-number":0}'
    return 200, b'{"text":"Success","code":0}'


@pytest.fixture
def hec(http_receivers: Callable[..., HttpReceiver]) -> HttpReceiver:
    return http_receivers(fake_hec)


def config_for(receiver: HttpReceiver, **extra: Any) -> dict[str, Any]:
    return SINK.clean_config({"url": receiver.url, **extra})


def test_a_batch_arrives_as_hec_events_with_time_host_source_sourcetype_index(
    hec: HttpReceiver,
) -> None:
    config = config_for(
        hec, index="security", host="mcp-1", source="mcptasks:acme", sourcetype="mcptasks:audit"
    )
    messages = [audit_message(seq=seq) for seq in (1, 2, 3)] + [approval_message()]
    SINK.send(config, TOKEN, messages, timeout=5)
    (request,) = hec.requests
    assert request.headers["Content-Type"] == "application/json"
    events = batch_of(request)
    assert len(events) == 4
    for event in events:
        assert event["time"] == round(WHEN.timestamp(), 3)
        assert event["host"] == "mcp-1"
        assert event["source"] == "mcptasks:acme"
        assert event["sourcetype"] == "mcptasks:audit"
        assert event["index"] == "security"
    assert [event["event"]["data"]["sequence"] for event in events[:3]] == [1, 2, 3]
    assert events[0]["event"]["id"] == "audit:tenant:acme:1"
    assert events[3]["event"]["type"] == "approval.requested"
    assert events[3]["event"]["url"].endswith("/answer/approve/")


def test_defaults_leave_host_and_index_to_hec(hec: HttpReceiver) -> None:
    config = config_for(hec)
    assert config == {
        "url": f"{hec.url}/services/collector/event",
        "source": "mcptasks",
        "sourcetype": "_json",
        "format": "json",
        "verify_tls": True,
    }
    SINK.send(config, TOKEN, [audit_message()], timeout=5)
    (event,) = batch_of(hec.requests[0])
    assert "index" not in event and "host" not in event


def test_the_event_endpoint_in_the_url_is_accepted_as_is(hec: HttpReceiver) -> None:
    config = SINK.clean_config({"url": f"{hec.url}/services/collector/event/"})
    assert config["url"] == f"{hec.url}/services/collector/event"


def test_ocsf_format_sends_audit_events_as_ocsf(hec: HttpReceiver) -> None:
    SINK.send(config_for(hec, format="ocsf"), TOKEN, [audit_message("auth.login")], timeout=5)
    (event,) = batch_of(hec.requests[0])
    assert event["event"]["class_uid"] == 3002
    assert ocsf.missing_required(event["event"]) == []


def test_a_wrong_token_is_not_retried_and_names_hecs_text(hec: HttpReceiver) -> None:
    with pytest.raises(DeliveryError) as caught:
        SINK.send(config_for(hec), "wrong-token-value", [audit_message()], timeout=5)
    assert caught.value.retryable is False
    assert caught.value.reason == "Splunk HEC answered 403: Invalid token (code 4)"


def test_a_missing_token_is_not_retried(hec: HttpReceiver) -> None:
    with pytest.raises(DeliveryError) as caught:
        SINK.send(config_for(hec), None, [audit_message()], timeout=5)
    assert caught.value.retryable is False
    assert hec.requests == []


def test_401_and_400_are_not_retried(http_receivers: Callable[..., HttpReceiver]) -> None:
    for status, body, text in (
        (401, b'{"text":"Token is required","code":2}', "401: Token is required (code 2)"),
        (
            400,
            b'{"text":"Invalid data format","code":6,"invalid-event-number":0}',
            "400: Invalid data format (code 6), invalid event 0",
        ),
        (400, b'{"text":"Data channel is missing","code":10}', "Data channel is missing"),
    ):
        receiver = http_receivers(lambda request, s=status, b=body: (s, b))
        with pytest.raises(DeliveryError) as caught:
            SINK.send(config_for(receiver), TOKEN, [audit_message()], timeout=5)
        assert caught.value.retryable is False
        assert text in caught.value.reason


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (503, b'{"text":"Server is busy","code":9}'),
        (500, b'{"text":"Internal server error","code":8}'),
        (429, b"slow down"),
    ],
)
def test_server_busy_and_5xx_are_retried(
    http_receivers: Callable[..., HttpReceiver], status: int, body: bytes
) -> None:
    receiver = http_receivers(lambda request: (status, body))
    with pytest.raises(DeliveryError) as caught:
        SINK.send(config_for(receiver), TOKEN, [audit_message()], timeout=5)
    assert caught.value.retryable is True
    assert caught.value.reason.startswith(f"Splunk HEC answered {status}")


def test_a_hec_that_is_down_is_a_retryable_failure() -> None:
    config = SINK.clean_config({"url": f"http://127.0.0.1:{free_port()}"})
    with pytest.raises(DeliveryError) as caught:
        SINK.send(config, TOKEN, [audit_message()], timeout=2)
    assert caught.value.retryable is True
    assert caught.value.reason.startswith("Splunk HEC: ConnectError")


def test_the_token_never_appears_in_a_reason_even_when_hec_echoes_it(
    http_receivers: Callable[..., HttpReceiver],
) -> None:
    echo = http_receivers(
        lambda request: (
            403,
            json.dumps({"text": f"bad {request.headers['Authorization']}"}).encode(),
        )
    )
    with pytest.raises(DeliveryError) as caught:
        SINK.send(config_for(echo), TOKEN, [audit_message()], timeout=5)
    assert TOKEN not in caught.value.reason
    assert TOKEN not in str(caught.value)
    assert "[secret]" in caught.value.reason


def test_https_with_the_collectors_ca_bundle(
    http_receivers: Callable[..., HttpReceiver], certificate: Certificate
) -> None:
    receiver = http_receivers(fake_hec, tls=certificate)
    url = receiver.url.replace("http://", "https://")
    config = SINK.clean_config({"url": url, "ca_bundle": certificate.cert.name})
    SINK.send(config, TOKEN, [audit_message()], timeout=5)
    assert len(receiver.requests) == 1
    with pytest.raises(DeliveryError) as caught:
        SINK.send(SINK.clean_config({"url": url}), TOKEN, [audit_message()], timeout=5)
    assert caught.value.retryable is False  # a refused certificate does not fix itself
    assert "CERTIFICATE_VERIFY_FAILED" in caught.value.reason


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({}, "url"),
        ({"url": "ftp://splunk.example.com"}, "url"),
        ({"url": "http://splunk.example.com:8088"}, "url"),  # plain http off loopback
        ({"url": "https://user:pw@splunk.example.com"}, "url"),
        ({"url": "https://splunk.example.com:99999"}, "url"),
        ({"url": "https://splunk.example.com/services/collector/raw"}, "url"),
        ({"url": "https://splunk.example.com?x=1"}, "url"),
        ({"url": "https://s.example.com", "index": "Bad Index"}, "index"),
        ({"url": "https://s.example.com", "index": "_internal"}, "index"),
        ({"url": "https://s.example.com", "source": "a b"}, "source"),
        ({"url": "https://s.example.com", "sourcetype": 7}, "sourcetype"),
        ({"url": "https://s.example.com", "host": "a b"}, "host"),
        ({"url": "https://s.example.com", "format": "cef"}, "format"),
        ({"url": "https://s.example.com", "verify_tls": "no"}, "verify_tls"),
        (
            {"url": "https://s.example.com", "ca_bundle": "/etc/ssl/certs/ca-certificates.crt"},
            "ca_bundle",
        ),
        ({"url": "https://s.example.com", "ca_bundle": "missing.pem"}, "ca_bundle"),
        ({"url": "https://s.example.com", "token": TOKEN}, "token"),
    ],
)
def test_each_bad_field_is_named(config: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        SINK.clean_config(config)
    assert caught.value.field == field
    assert TOKEN not in str(caught.value)


def test_the_sink_declares_its_secret() -> None:
    assert SINK.secret_required is True
    assert SINK.secret_label == "HEC token"
    assert SINK.max_batch > 1


def test_a_large_batch_is_split_into_bodies_hec_accepts_in_order(hec: HttpReceiver) -> None:
    from mcptasks.sinks import splunk_hec

    messages = [audit_message(seq=seq, blob="x" * 15_000) for seq in range(1, 101)]
    SINK.send(config_for(hec), TOKEN, messages, timeout=10)
    assert len(hec.requests) > 1
    assert all(len(request.body) <= splunk_hec.MAX_BODY_BYTES for request in hec.requests)
    sequences = [
        event["event"]["data"]["sequence"]
        for request in hec.requests
        for event in batch_of(request)
    ]
    assert sequences == list(range(1, 101))


def test_verify_tls_off_accepts_a_self_signed_hec(
    http_receivers: Callable[..., HttpReceiver], certificate: Certificate
) -> None:
    receiver = http_receivers(fake_hec, tls=certificate)
    url = receiver.url.replace("http://", "https://")
    SINK.send(
        SINK.clean_config({"url": url, "verify_tls": False}), TOKEN, [audit_message()], timeout=5
    )
    assert len(receiver.requests) == 1
    with pytest.raises(ConfigError) as caught:
        SINK.clean_config({"url": url, "verify_tls": False, "ca_bundle": certificate.cert.name})
    assert caught.value.field == "ca_bundle"
