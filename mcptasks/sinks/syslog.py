"""Syslog over TCP, optionally TLS: RFC 5424 messages in RFC 6587 octet-counting framing, the
message body in CEF (ArcSight Common Event Format, version 0) or JSON (docs/destinations.md).

One connection per batch; a message counts as sent once the kernel accepted its bytes (syslog
over TCP has no acknowledgement). :data:`CEF_EVENTS` holds the CEF signature ids, names and
severities of every audit action (read from audit.actions' table) and every task event type.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from functools import cache
from typing import Any

from django.conf import settings

from audit.actions import ACTIONS
from mcptasks.sinks import ConfigError, DeliveryError, Message, Sink
from mcptasks.sinks._common import (
    audit_row,
    boolean,
    ca_bundle,
    check_fields,
    choice,
    dumps,
    integer,
    recheck,
    required_text,
    short,
    structured,
    text,
    tls_context,
)

# ---------------------------------------------------------------- CEF


@dataclass(frozen=True)
class CefEvent:
    signature_id: str
    name: str
    severity: int  # CEF 0 (lowest) … 10 (highest)


def _events(*rows: tuple[str, int, str, int]) -> dict[str, CefEvent]:
    return {
        action: CefEvent(str(number), name, severity) for action, number, name, severity in rows
    }


# Audit actions (their signatures are audit.actions' table) and the task event types a
# destination subscribes to, where the two share a name they mean the same change; in the order
# of their numbers (1xx tasks, 2xx effects, 3xx approvals, 4xx identity and access, 5xx the
# audit trail itself, 6xx where events go).
CEF_EVENTS: dict[str, CefEvent] = dict(
    sorted(
        {
            **{a.action: CefEvent(str(a.cef_id), a.cef_name, a.severity) for a in ACTIONS.values()},
            **_events(
                ("task.changed", 116, "Task changed", 3),
                ("task.status_changed", 150, "Task status changed", 3),
                ("approval.requested", 300, "Approval requested", 4),
                ("approval.decided", 304, "Approval decided", 5),
            ),
        }.items(),
        key=lambda row: int(row[1].signature_id),
    )
)
# An action added after this table: still sent, under its own name, never dropped.
CEF_OTHER = CefEvent("999", "Other event", 3)
CEF_FAILURES = frozenset({"auth.login_failed", "task.failed", "approval.rejected"})
CEF_MSG_MAX = 4000  # characters of the data's JSON in ``msg``; beyond, it ends in "…"


def cef_event(action: str) -> CefEvent:
    known = CEF_EVENTS.get(action)
    return known if known is not None else CefEvent(CEF_OTHER.signature_id, action, 3)


def cef_header(value: object) -> str:
    """A CEF header field: backslash and pipe escaped; a line break (not allowed) as a space."""
    escaped = str(value).replace("\\", "\\\\").replace("|", "\\|")
    return escaped.replace("\r\n", " ").replace("\r", " ").replace("\n", " ")


def cef_value(value: object) -> str:
    """A CEF extension value: backslash, equals sign and line breaks escaped."""
    escaped = str(value).replace("\\", "\\\\").replace("=", "\\=")
    return escaped.replace("\r", "\\r").replace("\n", "\\n")


def _ip(value: Any) -> str | None:
    try:
        return str(ipaddress.ip_address(str(value)))
    except ValueError:
        return None


def cef(message: Message, *, host: str) -> str:
    """``message`` as one CEF:0 line (no line break in it)."""
    row = audit_row(message)
    data = row["data"] if row is not None else message.data
    data = data if isinstance(data, Mapping) else {"value": data}
    action = row["action"] if row is not None else message.type
    event = cef_event(str(action))
    extension: list[tuple[str, Any]] = [
        ("rt", int(message.timestamp.timestamp() * 1000)),
        ("externalId", message.id),
        ("cat", message.type),
        ("act", action),
        ("dvchost", host),
        ("cs5Label", "tenant"),
        ("cs5", message.tenant),
    ]
    if row is not None:
        extension += [
            ("suser", row["actor_display"] or row["actor_kind"]),
            ("suid", row["actor_id"]),
            ("cs1Label", "chain"),
            ("cs1", row["chain"]),
            ("cn1Label", "seq"),
            ("cn1", row["seq"]),
            ("cs2Label", "hash"),
            ("cs2", row["hash"]),
            ("cs3Label", "prevHash"),
            ("cs3", row["prev_hash"]),
            ("cs6Label", "requestId"),
            ("cs6", row["request_id"]),
        ]
        task_id = row["task_id"]
    else:
        task: Mapping[str, Any] = data["task"] if isinstance(data.get("task"), Mapping) else data
        task_id = task.get("task_id") or task.get("taskId") or task.get("id") or ""
    if task_id:
        extension += [("cs4Label", "taskId"), ("cs4", task_id)]
    source_ip = _ip(data["ip"]) if data.get("ip") else None
    if source_ip:
        extension.append(("src", source_ip))
    if data.get("user_agent"):
        extension.append(("requestClientApplication", short(str(data["user_agent"]), 512)))
    if str(action) in CEF_FAILURES or (row is not None and str(action).startswith("auth.")):
        extension.append(("outcome", "failure" if str(action) in CEF_FAILURES else "success"))
    if message.url:
        extension.append(("request", message.url))
    body = dumps(data)
    extension.append(("msg", body if len(body) <= CEF_MSG_MAX else body[: CEF_MSG_MAX - 1] + "…"))
    header = [
        "CEF:0",
        "mcptasks",
        "mcptasks",
        settings.MCPTASKS_VERSION,
        event.signature_id,
        event.name,
        str(event.severity),
    ]
    present = {key for key, value in extension if value not in (None, "")}
    rendered_extension = " ".join(
        f"{key}={cef_value(value)}"
        for key, value in extension
        # a custom field's label only with its value
        if key in present and not (key.endswith("Label") and key[: -len("Label")] not in present)
    )
    return "|".join(cef_header(part) for part in header) + "|" + rendered_extension


# ---------------------------------------------------------------- RFC 5424

FACILITIES = {
    "kern": 0,
    "user": 1,
    "mail": 2,
    "daemon": 3,
    "auth": 4,
    "syslog": 5,
    "lpr": 6,
    "news": 7,
    "uucp": 8,
    "cron": 9,
    "authpriv": 10,
    "ftp": 11,
    "ntp": 12,
    "security": 13,
    "console": 14,
    "solaris-cron": 15,
    **{f"local{number}": 16 + number for number in range(8)},
}
PRINTUSASCII = r"[\x21-\x7e]"
NILVALUE = "-"


def syslog_severity(cef_severity: int) -> int:
    """RFC 5424 severity of a CEF severity: 6 informational … 2 critical."""
    for ceiling, severity in ((3, 6), (5, 5), (7, 4), (9, 3)):
        if cef_severity <= ceiling:
            return severity
    return 2


def _field(value: str, limit: int) -> str:
    """An RFC 5424 header field: printable US-ASCII without spaces, at most ``limit``."""
    cleaned = re.sub(r"[^\x21-\x7e]", "_", value)[:limit]
    return cleaned or NILVALUE


def rfc5424(message: Message, *, facility: int, hostname: str, app_name: str, layout: str) -> bytes:
    """One RFC 5424 message (``<PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MSGID - MSG``)."""
    row = audit_row(message)
    action = str(row["action"]) if row is not None else message.type
    severity = syslog_severity(cef_event(action).severity)
    timestamp = message.timestamp.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    body = cef(message, host=hostname) if layout == "cef" else dumps(structured(message, layout))
    header = " ".join(
        (
            f"<{facility * 8 + severity}>1",
            timestamp,
            _field(hostname, 255),
            _field(app_name, 48),
            _field(str(os.getpid()), 128),
            _field(action, 32),
            NILVALUE,  # no structured data: what a receiver needs is in the body
        )
    )
    return f"{header} {body}".encode()


def frame(payload: bytes) -> bytes:
    """RFC 6587 octet counting: the length in decimal, a space, the message."""
    return f"{len(payload)} ".encode() + payload


# ---------------------------------------------------------------- the sink

HOSTNAME = r"(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?"
FIELDS = ("host", "port", "tls", "ca_bundle", "app_name", "facility", "format", "hostname")
FORMATS = ("cef", "json", "ocsf")


def _host(config: Mapping[str, Any]) -> str:
    host = required_text(config, "host", max_length=253)
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        pass
    if not re.fullmatch(HOSTNAME, host):
        raise ConfigError("host", "must be a host name or an IP address")
    return host


def _facility(config: Mapping[str, Any]) -> int:
    value = config.get("facility", "local0")
    if isinstance(value, str) and value.lower() in FACILITIES:
        return FACILITIES[value.lower()]
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 23:
        return value
    raise ConfigError("facility", "must be a facility name (e.g. local0, authpriv) or 0–23")


def _ca_bundle(config: Mapping[str, Any], tls: bool) -> str | None:
    path = ca_bundle(config)
    if path is not None and not tls:
        raise ConfigError("ca_bundle", "only applies with tls on")
    return path


@cache  # getfqdn may ask DNS: once per process, not per batch
def default_hostname() -> str:
    return _field(socket.getfqdn() or socket.gethostname(), 255)


# How long a sent batch waits for the collector to close its end (it has then read everything).
DRAIN_S = 2.0


def _close_tls(tls: ssl.SSLSocket, timeout: float) -> socket.socket:
    """Send TLS close_notify; the plain socket underneath (the collector may not answer it)."""
    tls.settimeout(min(timeout, DRAIN_S))
    try:
        return tls.unwrap()
    except (ssl.SSLError, TimeoutError, OSError):
        return tls


def _drain(connection: socket.socket, timeout: float) -> None:
    """Half-close and wait until the collector closes too: it has then consumed the batch, so
    the next batch (a new connection) cannot overtake this one. A collector that keeps the
    connection open past DRAIN_S is taken to have it (syslog has no acknowledgement); one that
    resets it may have lost part of it, which is a retryable failure."""
    try:
        connection.shutdown(socket.SHUT_WR)
    except OSError:
        return  # already closed by the peer; a reset shows below or never
    connection.settimeout(min(timeout, DRAIN_S))
    try:
        while connection.recv(4096):
            pass
    except TimeoutError:
        return
    except ssl.SSLError:
        return


class SyslogSink(Sink):
    kind = "syslog"
    label = "Syslog over TCP/TLS (RFC 5424, CEF or JSON)"
    secret_label = None
    secret_required = False
    max_batch = 200

    def clean_config(self, config: Mapping[str, Any]) -> dict[str, Any]:
        check_fields(config, FIELDS)
        tls = boolean(config, "tls", default=True)
        cleaned: dict[str, Any] = {
            "host": _host(config),
            "port": integer(config, "port", default=6514 if tls else 514, minimum=1, maximum=65535),
            "tls": tls,
            "app_name": text(
                config,
                "app_name",
                default="mcptasks",
                max_length=48,
                pattern=f"{PRINTUSASCII}+",
                pattern_help="must be printable ASCII without spaces",
            ),
            "facility": _facility(config),
            "format": choice(config, "format", FORMATS, default="cef"),
        }
        ca_bundle = _ca_bundle(config, tls)
        if ca_bundle is not None:
            cleaned["ca_bundle"] = ca_bundle
        hostname = text(
            config,
            "hostname",
            max_length=255,
            pattern=f"{PRINTUSASCII}+",
            pattern_help="must be printable ASCII without spaces",
        )
        if hostname is not None:
            cleaned["hostname"] = hostname
        return cleaned

    def send(
        self,
        config: Mapping[str, Any],
        secret: str | None,
        messages: Sequence[Message],
        *,
        timeout: float,
    ) -> None:
        config = recheck(self.clean_config, config)
        hostname = config.get("hostname") or default_hostname()
        payload = b"".join(
            frame(
                rfc5424(
                    message,
                    facility=config["facility"],
                    hostname=hostname,
                    app_name=config["app_name"],
                    layout=config["format"],
                )
            )
            for message in messages
        )
        where = f"syslog {config['host']}:{config['port']}"
        try:
            with socket.create_connection((config["host"], config["port"]), timeout=timeout) as raw:
                if config["tls"]:
                    context = tls_context(config.get("ca_bundle"))
                    with context.wrap_socket(raw, server_hostname=config["host"]) as tls:
                        tls.sendall(payload)
                        closing: socket.socket = _close_tls(tls, timeout)
                        _drain(closing, timeout)
                else:
                    raw.sendall(payload)
                    _drain(raw, timeout)
        except ssl.SSLCertVerificationError as error:
            raise DeliveryError(
                f"{where}: certificate refused: {short(error.verify_message or str(error))}",
                retryable=False,
            ) from None
        except TimeoutError:
            raise DeliveryError(f"{where}: timed out after {timeout:g} s") from None
        except ssl.SSLError as error:
            raise DeliveryError(f"{where}: TLS failed: {short(str(error))}") from None
        except OSError as error:
            raise DeliveryError(f"{where}: {short(error.strerror or str(error))}") from None


SINK = SyslogSink()
