"""HTTPS webhooks signed in the Standard Webhooks style (https://www.standardwebhooks.com).

Each message is one POST of its JSON body ``{"id", "type", "timestamp", "tenant", "data",
"url", "recipients"}`` with the headers

- ``webhook-id``: the message id, stable across retries (de-duplicate on it);
- ``webhook-timestamp``: the attempt's Unix time in seconds;
- ``webhook-signature``: ``v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">``, keyed with
  the base64-decoded part of the destination's secret ``whsec_<base64>``.

2xx is delivered; 408, 429, 5xx and connection errors are retried; any other answer is final
(the delivery is dead-lettered). Redirects are not followed. ``http://`` is accepted only for
loopback hosts, or everywhere with ``MCPTASKS_WEBHOOK_ALLOW_HTTP``.

Receivers check a request with :func:`verify` (docs/webhooks.md has a stand-alone snippet).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import ipaddress
import json
import secrets
import ssl
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings

from mcptasks.sinks import ConfigError, DeliveryError, Message, Sink

SECRET_PREFIX = "whsec_"
RETRYABLE_STATUSES = frozenset({408, 429})
DEFAULT_TOLERANCE_S = 300
USER_AGENT = "mcptasks-webhooks/1"


class WebhookVerificationError(Exception):
    """A request that is not a valid webhook of the holder of the secret."""


def new_secret() -> str:
    """A fresh signing secret: ``whsec_`` and 32 random bytes in base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def _key(secret: str) -> bytes:
    if not secret.startswith(SECRET_PREFIX):
        raise ValueError("a signing secret starts with whsec_")
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except ValueError:
        raise ValueError("a signing secret is whsec_ followed by base64") from None
    if not 24 <= len(key) <= 64:
        raise ValueError("a signing secret holds 24 to 64 bytes")
    return key


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value of a body."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes | str,
    *,
    tolerance_s: int = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> dict[str, Any]:
    """Check a received webhook and return its parsed JSON body.

    ``headers`` is any mapping of the request's headers (names in any case). Raises
    :class:`WebhookVerificationError` when a header is missing, the timestamp is further than
    ``tolerance_s`` from now (a replay), or no ``v1`` signature matches (a wrong secret, an
    altered body)."""
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    message_id = lowered.get("webhook-id", "")
    stamp = lowered.get("webhook-timestamp", "")
    signatures = lowered.get("webhook-signature", "")
    if not (message_id and stamp and signatures):
        raise WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature")
    try:
        timestamp = int(stamp)
    except ValueError:
        raise WebhookVerificationError("webhook-timestamp is not a number") from None
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance_s:
        raise WebhookVerificationError("webhook-timestamp is too far from now")
    raw = body.encode() if isinstance(body, str) else bytes(body)
    try:
        expected = sign(secret, message_id, timestamp, raw).split(",", 1)[1]
    except ValueError as exc:
        raise WebhookVerificationError(str(exc)) from None
    for candidate in signatures.split():
        version, _, value = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(value.encode(), expected.encode()):
            try:
                parsed = json.loads(raw)
            except ValueError:
                raise WebhookVerificationError("the body is not JSON") from None
            if not isinstance(parsed, dict):
                raise WebhookVerificationError("the body is not a JSON object")
            return parsed
    raise WebhookVerificationError("no matching signature")


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One verifying TLS context per process: building one loads the CA bundle (~100 ms)."""
    return httpx.create_ssl_context()


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def body_of(message: Message) -> bytes:
    return json.dumps(
        {
            "id": message.id,
            "type": message.type,
            "timestamp": message.timestamp.isoformat(),
            "tenant": message.tenant,
            "data": message.data,
            "url": message.url,
            "recipients": list(message.recipients),
        },
        separators=(",", ":"),
        sort_keys=True,
    ).encode()


class WebhookSink(Sink):
    kind = "webhook"
    label = "HTTPS webhook (Standard Webhooks signing)"
    secret_label = "Signing secret (whsec_…)"
    secret_required = True
    max_batch = 1

    def clean_config(self, config: Mapping[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(config) - {"url"})
        if unknown:
            raise ConfigError(unknown[0], "is not a setting of a webhook (only url)")
        url = config.get("url")
        if not isinstance(url, str) or not url.strip():
            raise ConfigError("url", "is required")
        url = url.strip()
        if len(url) > 2000:
            raise ConfigError("url", "is longer than 2000 characters")
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError on a bad port
        except ValueError:
            raise ConfigError("url", "is not a valid URL") from None
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ConfigError("url", "must be an https:// URL with a host")
        if parts.username or parts.password:
            raise ConfigError("url", "must not carry credentials (the secret signs instead)")
        if (
            parts.scheme == "http"
            and not _is_loopback(parts.hostname)
            and not settings.MCPTASKS_WEBHOOK_ALLOW_HTTP
        ):
            raise ConfigError(
                "url",
                "must use https:// (http:// only for loopback hosts, or with "
                "MCPTASKS_WEBHOOK_ALLOW_HTTP)",
            )
        return {"url": url}

    def clean_secret(self, secret: str) -> str:
        try:
            _key(secret.strip())
        except ValueError as exc:
            raise ConfigError("secret", str(exc)) from None
        return secret.strip()

    def send(
        self,
        config: Mapping[str, Any],
        secret: str | None,
        messages: Sequence[Message],
        *,
        timeout: float,
    ) -> None:
        if not secret:
            raise DeliveryError("the destination has no signing secret", retryable=False)
        url = self.clean_config(config)["url"]
        with httpx.Client(
            timeout=timeout, follow_redirects=False, trust_env=False, verify=_tls_context()
        ) as client:
            for message in messages:
                body = body_of(message)
                stamp = int(time.time())
                headers = {
                    "content-type": "application/json",
                    "user-agent": USER_AGENT,
                    "webhook-id": message.id,
                    "webhook-timestamp": str(stamp),
                    "webhook-signature": sign(secret, message.id, stamp, body),
                }
                try:
                    response = client.post(url, content=body, headers=headers)
                except httpx.ConnectError as exc:
                    if isinstance(exc.__cause__, ssl.SSLCertVerificationError) or (
                        "CERTIFICATE_VERIFY_FAILED" in str(exc)
                    ):
                        raise DeliveryError(
                            "the receiver's TLS certificate was refused", retryable=False
                        ) from None
                    raise DeliveryError("could not connect to the receiver") from None
                except httpx.TimeoutException:
                    raise DeliveryError(f"no answer within {timeout:g} s") from None
                except httpx.HTTPError as exc:
                    raise DeliveryError(f"HTTP error ({type(exc).__name__})") from None
                status = response.status_code
                if 200 <= status < 300:
                    continue
                retryable = status >= 500 or status in RETRYABLE_STATUSES
                raise DeliveryError(f"the receiver answered HTTP {status}", retryable=retryable)


SINK = WebhookSink()
