"""Splunk HTTP Event Collector, ack-less mode (docs/destinations.md, "Splunk HEC").

A batch is one POST to ``<url>/services/collector/event`` with ``Authorization: Splunk <token>``
(the destination's secret): the events as concatenated JSON objects, each with ``time`` (epoch
seconds), ``host``, ``source``, ``sourcetype``, ``index`` (when configured) and ``event`` (the
message, or for audit events optionally its OCSF rendering). HEC answers ``{"text", "code"}``:
5xx (503 "Server is busy") and 408/429 are retried; 400/401/403 and any other status are not,
with HEC's text in the reason.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from mcptasks.sinks import ConfigError, DeliveryError, Message, Sink
from mcptasks.sinks._common import (
    boolean,
    ca_bundle,
    check_fields,
    choice,
    dumps,
    http_url,
    post,
    recheck,
    required_text,
    scrub,
    short,
    status_retryable,
    structured,
    text,
    tls_context,
)

ENDPOINT = "/services/collector/event"
MAX_BODY_BYTES = 512 * 1024
FIELDS = ("url", "index", "source", "sourcetype", "host", "format", "verify_tls", "ca_bundle")
NAME = r"[A-Za-z0-9_][A-Za-z0-9_.:/-]*"
# HEC index names: lower case letters, digits, underscores and hyphens, not starting with _ or -.
INDEX = r"[a-z0-9][a-z0-9_-]*"


def _url(config: Mapping[str, Any]) -> str:
    url = http_url(required_text(config, "url", max_length=2000), "url")
    parts = urlsplit(url)
    if parts.query or parts.fragment:
        raise ConfigError("url", "must not carry a query or a fragment")
    path = parts.path.rstrip("/")
    if path.endswith(ENDPOINT):
        path = path.removesuffix(ENDPOINT)
    elif path.endswith("/services/collector") or path.endswith("/services/collector/raw"):
        raise ConfigError("url", f"HEC's event endpoint is {ENDPOINT}: give the base URL")
    return urlunsplit((parts.scheme, parts.netloc, path + ENDPOINT, "", ""))


def _hec_text(body: bytes) -> str:
    """HEC's ``text`` (and ``code``) from an answer, or the first of its body."""
    try:
        answer = json.loads(body)
    except ValueError:
        return short(body.decode("utf-8", "replace"), 200) or "(no body)"
    if not isinstance(answer, dict):
        return short(str(answer), 200)
    reason = short(str(answer.get("text") or "(no text)"), 200)
    if answer.get("code") is not None:
        reason += f" (code {answer['code']})"
    if answer.get("invalid-event-number") is not None:
        reason += f", invalid event {answer['invalid-event-number']}"
    return reason


class SplunkHecSink(Sink):
    kind = "splunk_hec"
    label = "Splunk HTTP Event Collector"
    secret_label = "HEC token"
    secret_required = True
    max_batch = 100

    def clean_config(self, config: Mapping[str, Any]) -> dict[str, Any]:
        check_fields(config, FIELDS)
        name_help = "must be letters, digits and _ . : / - only"
        cleaned: dict[str, Any] = {
            "url": _url(config),
            "source": text(
                config, "source", default="mcptasks", pattern=NAME, pattern_help=name_help
            ),
            "sourcetype": text(
                config, "sourcetype", default="_json", pattern=NAME, pattern_help=name_help
            ),
            "format": choice(config, "format", ("json", "ocsf"), default="json"),
            "verify_tls": boolean(config, "verify_tls", default=True),
        }
        index = text(
            config,
            "index",
            max_length=80,
            pattern=INDEX,
            pattern_help="must be lower case letters, digits, _ and - (not first)",
        )
        if index is not None:
            cleaned["index"] = index
        host = text(config, "host", max_length=255, pattern=r"[\x21-\x7e]+",
                    pattern_help="must be printable ASCII without spaces")  # fmt: skip
        if host is not None:
            cleaned["host"] = host
        bundle = ca_bundle(config)
        if bundle is not None:
            if not cleaned["verify_tls"]:
                raise ConfigError("ca_bundle", "has no use with verify_tls off")
            cleaned["ca_bundle"] = bundle
        return cleaned

    def render(self, config: Mapping[str, Any], messages: Sequence[Message]) -> list[bytes]:
        """The batch as request bodies of HEC event objects, newline separated, each body at
        most :data:`MAX_BODY_BYTES` (HEC's ``max_content_length`` was 1 MB before Splunk 8)."""
        bodies: list[bytes] = []
        current: list[bytes] = []
        size = 0
        for message in messages:
            event: dict[str, Any] = {
                "time": round(message.timestamp.timestamp(), 3),
                "source": config["source"],
                "sourcetype": config["sourcetype"],
                "event": structured(message, config["format"]),
            }
            if config.get("host"):
                event["host"] = config["host"]
            if config.get("index"):
                event["index"] = config["index"]
            line = dumps(event).encode()
            if current and size + len(line) + 1 > MAX_BODY_BYTES:
                bodies.append(b"\n".join(current))
                current, size = [], 0
            current.append(line)
            size += len(line) + 1
        if current:
            bodies.append(b"\n".join(current))
        return bodies

    def send(
        self,
        config: Mapping[str, Any],
        secret: str | None,
        messages: Sequence[Message],
        *,
        timeout: float,
    ) -> None:
        config = recheck(self.clean_config, config)
        token = (secret or "").strip()
        if not token:
            raise DeliveryError("no HEC token is set for this destination", retryable=False)
        if any(char.isspace() or ord(char) < 32 for char in token):
            raise DeliveryError("the HEC token holds white space or control characters", retryable=False)  # fmt: skip
        verify: bool | ssl.SSLContext = (
            tls_context(config.get("ca_bundle")) if config["verify_tls"] else False
        )
        # In order; when a later body fails the batch is retried whole (receivers de-duplicate
        # on the event id).
        for body in self.render(config, messages):
            response = post(
                config["url"],
                content=body,
                headers={"Authorization": f"Splunk {token}", "Content-Type": "application/json"},
                timeout=timeout,
                verify=verify,
                what="Splunk HEC",
                secrets=[token],
            )
            if response.status_code == 200:
                continue
            reason = scrub(_hec_text(response.content), [token])
            raise DeliveryError(
                f"Splunk HEC answered {response.status_code}: {reason}",
                retryable=status_retryable(response.status_code),
            )


SINK = SplunkHecSink()
