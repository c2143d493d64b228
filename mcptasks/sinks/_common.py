"""What the kinds of destination share: strict config checks, the JSON rendering of a message,
HTTP sending with errors that name no secret, and what a human notification says.

Not a kind (the leading underscore keeps :func:`mcptasks.sinks.sinks` from loading it as one).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import ssl
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import httpx

from mcptasks.sinks import ConfigError, DeliveryError, Message

# ---------------------------------------------------------------- config checks


def check_fields(config: Mapping[str, Any], allowed: Iterable[str]) -> None:
    """Refuse a config that is not a JSON object or names a field this kind does not know."""
    if not isinstance(config, Mapping):
        raise ConfigError("config", "must be a JSON object")
    allowed = set(allowed)
    for name in config:
        if name not in allowed:
            raise ConfigError(str(name), f"unknown field (known: {', '.join(sorted(allowed))})")


def text(
    config: Mapping[str, Any],
    name: str,
    *,
    default: str | None = None,
    max_length: int = 200,
    pattern: str | None = None,
    pattern_help: str = "",
) -> str | None:
    """A string field, stripped; ``default`` when absent or empty (None: optional)."""
    value = config.get(name)
    if value is None or value == "":
        return default
    if not isinstance(value, str):
        raise ConfigError(name, "must be a string")
    value = value.strip()
    if not value:
        return default
    if len(value) > max_length:
        raise ConfigError(name, f"must be at most {max_length} characters")
    if any(ord(char) < 32 or ord(char) == 127 for char in value):
        raise ConfigError(name, "must not contain control characters")
    if pattern is not None and not re.fullmatch(pattern, value):
        raise ConfigError(name, pattern_help or f"must match {pattern}")
    return value


def required_text(config: Mapping[str, Any], name: str, **kwargs: Any) -> str:
    value = text(config, name, **kwargs)
    if value is None:
        raise ConfigError(name, "is required")
    return value


def boolean(config: Mapping[str, Any], name: str, *, default: bool) -> bool:
    value = config.get(name, default)
    if not isinstance(value, bool):
        raise ConfigError(name, "must be true or false")
    return value


def integer(
    config: Mapping[str, Any], name: str, *, default: int | None, minimum: int, maximum: int
) -> int | None:
    value = config.get(name, default)
    if value is None:
        return None
    # bool is an int in Python; a JSON true is not a port.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(name, "must be an integer")
    if not minimum <= value <= maximum:
        raise ConfigError(name, f"must be between {minimum} and {maximum}")
    return value


def choice(config: Mapping[str, Any], name: str, choices: Sequence[str], *, default: str) -> str:
    value = config.get(name, default)
    if value not in choices:
        raise ConfigError(name, f"must be one of {', '.join(choices)}")
    return str(value)


def relative_path(config: Mapping[str, Any], name: str) -> str | None:
    """An optional path relative to a directory the operator chose: ``/`` separators, no
    absolute path, no ``..``, no hidden names."""
    raw = text(config, name, max_length=500)
    if raw is None:
        return None
    if "\\" in raw or "\x00" in raw:
        raise ConfigError(name, "must be a relative path with / separators")
    path = PurePosixPath(raw)
    if path.is_absolute():
        raise ConfigError(name, "must be a relative path, not absolute")
    if ".." in path.parts:
        raise ConfigError(name, "must not contain ..")
    if raw.endswith("/") or path.name in ("", "."):
        raise ConfigError(name, "must name a file")
    if any(part.startswith(".") for part in path.parts):
        raise ConfigError(name, "must not name a hidden file or directory")
    return str(path)


def under(base: Path, relative: str) -> Path | None:
    """``relative`` resolved under ``base``; None when a symlink leads out of ``base``."""
    root = base.resolve()
    target = (root / relative).resolve()
    return target if target.is_relative_to(root) else None


def ca_bundle(config: Mapping[str, Any], name: str = "ca_bundle") -> str | None:
    """An optional PEM bundle of CA certificates to trust, named relative to
    ``MCPTASKS_SINKS_CA_DIR``: tenant admins configure destinations, so they choose among the
    bundles the operator placed there, never any file of the server. Returns the relative
    name; :func:`ca_file` gives the file."""
    relative = relative_path(config, name)
    if relative is None:
        return None
    path = ca_file(relative)
    if path is None or not path.is_file() or not os.access(path, os.R_OK):
        raise ConfigError(name, "is not a readable file in the CA directory")
    try:
        ssl.create_default_context(cafile=str(path))
    except (ssl.SSLError, OSError, ValueError):
        raise ConfigError(name, "holds no PEM certificate") from None
    return relative


def ca_file(relative: str) -> Path | None:
    from django.conf import settings

    return under(Path(settings.MCPTASKS_SINKS_CA_DIR), relative)


def tls_context(relative: str | None) -> ssl.SSLContext:
    """A client context trusting the bundle ``relative`` names, else certifi's CAs (as httpx
    does). Cached: loading a bundle costs tens of milliseconds, more than a local send."""
    path = ca_file(relative) if relative else None
    if path is None:
        return _context(None, 0)
    try:
        modified = path.stat().st_mtime_ns
    except OSError:
        modified = 0  # gone since the config was checked: loading it fails below, as it should
    return _context(str(path), modified)


@lru_cache(maxsize=32)
def _context(cafile: str | None, modified: int) -> ssl.SSLContext:
    del modified  # part of the key only: a replaced bundle is loaded again
    return ssl.create_default_context(cafile=cafile) if cafile else httpx.create_ssl_context()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def http_url(value: str, field_name: str) -> str:
    """An ``https://`` URL with a host, or ``http://`` to a loopback address (a local collector,
    a test); anything else is refused naming ``field_name`` (never echoing the value: a Slack
    webhook URL is a secret)."""
    try:
        parts = urlsplit(value)
        port = parts.port  # raises on a port out of range
    except ValueError:
        raise ConfigError(field_name, "is not a valid URL") from None
    del port
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(field_name, "must be an https:// URL")
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        raise ConfigError(field_name, "must be https:// (plain http only to a loopback address)")
    if parts.username or parts.password:
        raise ConfigError(field_name, "must not carry credentials")
    if any(char.isspace() for char in value):
        raise ConfigError(field_name, "must not contain white space")
    return value


# ---------------------------------------------------------------- rendering


def envelope(message: Message) -> dict[str, Any]:
    """The message as one JSON object: what the SIEM kinds send and the JSONL file holds."""
    rendered: dict[str, Any] = {
        "id": message.id,
        "type": message.type,
        "timestamp": message.timestamp.isoformat().replace("+00:00", "Z"),
        "tenant": message.tenant,
        "data": message.data,
    }
    if message.url:
        rendered["url"] = message.url
    return rendered


AUDIT_TYPE = "audit.event"


def audit_row(message: Message) -> dict[str, Any] | None:
    """The stored audit event an ``audit.event`` message carries, as a dict of the fields of
    :data:`audit.chain.ROW_FIELDS`, or None for any other message. The outbox sends
    ``{"chain", "sequence", "prev_hash", "hash", "event": <the hashed body>}``; a flat row (an
    export's line) is read as well."""
    data = message.data
    if message.type != AUDIT_TYPE or not isinstance(data, Mapping):
        return None
    if isinstance(data.get("event"), Mapping) and "action" in data["event"]:
        found = {
            **data["event"],
            "prev_hash": data.get("prev_hash", ""),
            "hash": data.get("hash", ""),
        }
    elif "action" in data:
        found = dict(data)
    else:
        return None
    row: dict[str, Any] = {
        "chain": f"tenant:{message.tenant}" if message.tenant else "system",
        "seq": data.get("sequence"),
        "created_at": message.timestamp.isoformat(),
        "tenant_id": None,
        "actor_kind": "",
        "actor_id": "",
        "actor_display": "",
        "task_id": "",
        "data": {},
        "request_id": "",
        "prev_hash": "",
        "hash": "",
    }
    row.update(found)
    if isinstance(row["created_at"], datetime):
        row["created_at"] = row["created_at"].isoformat()
    return row


def structured(message: Message, layout: str) -> dict[str, Any]:
    """The JSON object of ``message`` in ``layout``: ``json`` (the envelope) or ``ocsf`` (an audit
    event as its OCSF event, see docs/audit.md; other messages keep the envelope)."""
    if layout == "ocsf":
        row = audit_row(message)
        if row is not None:
            from audit.ocsf import to_ocsf

            rendered = to_ocsf(row)
            rendered["metadata"] = {**rendered["metadata"], "event_id": message.id}
            return rendered
    return envelope(message)


def dumps(value: Any) -> str:
    """Compact JSON, UTF-8 as is; anything not JSON-able (a stray datetime) as its string."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


# ---------------------------------------------------------------- HTTP


def scrub(text_value: str, secrets: Iterable[str | None]) -> str:
    """``text_value`` with every secret (and, for a URL secret, its path and query) replaced."""
    for secret in secrets:
        if not secret:
            continue
        text_value = text_value.replace(secret, "[secret]")
        parts = urlsplit(secret) if "://" in secret else None
        if parts is not None:
            for piece in (parts.path, parts.query):
                if len(piece) > 1:
                    text_value = text_value.replace(piece, "[secret]")
    return text_value


def short(text_value: str, limit: int = 200) -> str:
    text_value = " ".join(text_value.split())
    return text_value if len(text_value) <= limit else text_value[: limit - 1] + "…"


def post(
    url: str,
    *,
    content: bytes,
    headers: Mapping[str, str],
    timeout: float,
    verify: bool | ssl.SSLContext | None = None,
    what: str,
    secrets: Sequence[str | None] = (),
) -> httpx.Response:
    """POST ``content``; a transport failure is a retryable :class:`DeliveryError` naming ``what``
    (never the URL, the headers or the body). Returns the response whatever its status."""
    try:
        if verify is None or verify is True:
            verify = tls_context(None)
        with httpx.Client(timeout=timeout, verify=verify, follow_redirects=False) as client:
            return client.post(url, content=content, headers=dict(headers))
    except httpx.TimeoutException:
        raise DeliveryError(f"{what}: timed out after {timeout:g} s") from None
    except httpx.TransportError as error:
        detail = scrub(short(str(error) or type(error).__name__), [url, *secrets])
        # A certificate the receiver's trust store refuses will not fix itself on a retry.
        certificate = "CERTIFICATE_VERIFY_FAILED" in str(error)
        raise DeliveryError(
            f"{what}: {type(error).__name__}: {detail}", retryable=not certificate
        ) from None
    except httpx.InvalidURL:
        raise DeliveryError(f"{what}: the URL is not valid", retryable=False) from None
    except (OSError, ValueError) as error:  # a CA bundle that cannot be read, a bad header
        detail = scrub(short(str(error) or type(error).__name__), [url, *secrets])
        raise DeliveryError(f"{what}: {type(error).__name__}: {detail}", retryable=False) from None


def status_retryable(status: int) -> bool:
    """5xx, 408 and 429 are worth another try; any other failure status is not."""
    return status >= 500 or status in (408, 429)


# ---------------------------------------------------------------- human notifications

TITLES = {
    "approval.requested": "Approval requested",
    "approval.decided": "Approval decided",
    "task.created": "Task created",
    "task.status_changed": "Task status changed",
    "task.input_requested": "Input requested",
    "task.completed": "Task completed",
    "task.failed": "Task failed",
    "task.cancelled": "Task cancelled",
    AUDIT_TYPE: "Audit event",
}
MAX_FIELDS = 20
MAX_VALUE = 300


@dataclass(frozen=True)
class Notice:
    """What a person is told about a message: a title and named, short, plain-text fields."""

    title: str
    task_id: str
    tool: str
    fields: tuple[tuple[str, str], ...]
    url: str | None

    @property
    def subject(self) -> str:
        about = " ".join(
            part for part in (self.tool, f"({self.task_id})" if self.task_id else "") if part
        )
        return short(f"{self.title}: {about}" if about else self.title, 150)


def _plain(value: Any) -> str:
    if isinstance(value, str):
        return short(value, MAX_VALUE)
    return short(dumps(value), MAX_VALUE)


TASK_FIELDS = (
    ("status", "Status"),
    ("outcome", "Outcome"),
    ("message", "Request"),
    ("decision", "Decision"),
    ("reviewer", "Reviewer"),
    ("comment", "Comment"),
    ("required", "Approvals required"),
    ("approvals", "Approvals so far"),
    ("reviewers", "May decide"),
    ("deadline_at", "Decide by"),
)
AUDIT_FIELDS = (
    ("action", "Action"),
    ("actor_display", "By"),
    ("chain", "Chain"),
    ("seq", "Sequence"),
)


def _value(sources: Sequence[Mapping[str, Any]], name: str) -> str:
    """The first non-empty ``name`` of ``sources`` as short text; a list of names joined."""
    for source in sources:
        value = source.get(name)
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return short(", ".join(value), MAX_VALUE)
        if value not in (None, "") and not isinstance(value, Mapping | list):
            return short(str(value), MAX_VALUE)
    return ""


def _mapping(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = data.get(name)
    return value if isinstance(value, Mapping) else {}


def notice(message: Message) -> Notice:
    """The title, task, tool and named fields of ``message``, read from its (redacted) data.

    A task event: the task's ``taskId`` (or ``id``) and ``status`` under ``task`` or at the top,
    ``tool`` and ``outcome`` at the top, and from ``approval`` (or ``gate``): the request
    ``message``, ``summary`` fields, ``required``, ``approvals``, ``reviewers``, ``comment``,
    ``decision``, ``reviewer``, ``deadline_at``. An audit event: its action, actor, chain and
    sequence. Nothing else of the data (no arguments) is shown. The link is ``Message.url``,
    else the task's ``dashboard_url``."""
    data: Mapping[str, Any] = message.data if isinstance(message.data, Mapping) else {}
    row = audit_row(message)
    names: Sequence[tuple[str, str]]
    if row is not None:
        sources: list[Mapping[str, Any]] = [row]
        names = AUDIT_FIELDS
        task_id, tool = _value(sources, "task_id"), ""
    else:
        gate = _mapping(data, "approval") or _mapping(data, "gate")
        sources = [_mapping(data, "task"), data, gate]
        names = TASK_FIELDS
        task_id = _value(sources, "taskId") or _value(sources, "task_id") or _value(sources, "id")
        tool = _value(sources, "tool") or _value(sources, "tool_name")
    fields: list[tuple[str, str]] = []
    for name, label in names:
        value = _value(sources, name)
        if value:
            fields.append((label, value))
    summary: Mapping[str, Any] = next(
        (s["summary"] for s in sources if isinstance(s.get("summary"), Mapping)), {}
    )
    for name, value in list(summary.items())[: MAX_FIELDS - len(fields)]:
        fields.append((short(str(name), 50), _plain(value)))
    link = message.url or data.get("dashboard_url")
    return Notice(
        title=TITLES.get(message.type, message.type),
        task_id=task_id,
        tool=tool,
        fields=tuple(fields),
        url=link if isinstance(link, str) and link.startswith(("https://", "http://")) else None,
    )


def recheck(clean: Any, config: Mapping[str, Any]) -> dict[str, Any]:
    """``clean(config)`` at send time (a CA bundle since removed, a config written by an older
    build): a config that no longer validates cannot deliver until an admin fixes it."""
    try:
        return dict(clean(config))
    except ConfigError as error:
        raise DeliveryError(f"config no longer valid: {error}", retryable=False) from None
