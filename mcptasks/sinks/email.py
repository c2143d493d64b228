"""E-mail through Django's mail backend (``EMAIL_BACKEND``: the console on the embedded default,
SMTP in production; docs/destinations.md, "E-mail").

One plain-text mail per message to the configured addresses and, with ``to_reviewers``, to the
message's recipients (the reviewers who may decide an approval). Subject and body name the task,
the tool, the summary fields and the link (``Message.url``); nothing else of the data — no raw
arguments, no secrets (the data is already redacted).
"""

from __future__ import annotations

import smtplib
from collections.abc import Mapping, Sequence
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage, get_connection
from django.core.validators import validate_email

from mcptasks.sinks import ConfigError, DeliveryError, Message, Sink
from mcptasks.sinks._common import Notice, boolean, check_fields, notice, recheck, short, text

FIELDS = ("to", "to_reviewers", "from_email", "subject_prefix")
MAX_ADDRESSES = 50


def _address(value: Any, field_name: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(field_name, "must hold e-mail addresses (strings)")
    address = value.strip()
    try:
        validate_email(address)
    except ValidationError:
        raise ConfigError(field_name, f"{short(address, 80)!r} is not an e-mail address") from None
    return address


def _addresses(config: Mapping[str, Any]) -> list[str]:
    value = config.get("to", [])
    if isinstance(value, str):
        value = [part for part in value.split(",") if part.strip()]
    if not isinstance(value, list):
        raise ConfigError("to", "must be a list of e-mail addresses")
    if len(value) > MAX_ADDRESSES:
        raise ConfigError("to", f"may hold at most {MAX_ADDRESSES} addresses")
    return list(dict.fromkeys(_address(item, "to") for item in value))


def body(item: Notice, message: Message) -> str:
    """The plain-text body: what happened, to which task, the named fields and the link."""
    lines = [item.title, ""]
    if item.task_id:
        lines.append(f"Task: {item.task_id}")
    if item.tool:
        lines.append(f"Tool: {item.tool}")
    lines.append(f"Tenant: {message.tenant}")
    lines.append(f"When: {message.timestamp.isoformat()}")
    lines += [f"{label}: {value}" for label, value in item.fields]
    if item.url:
        lines += ["", f"Open: {item.url}"]
    lines += ["", f"Event {message.id} ({message.type}) from mcptasks."]
    return "\n".join(lines) + "\n"


class EmailSink(Sink):
    kind = "email"
    label = "E-mail"
    secret_label = None
    secret_required = False
    max_batch = 20

    def clean_config(self, config: Mapping[str, Any]) -> dict[str, Any]:
        check_fields(config, FIELDS)
        cleaned: dict[str, Any] = {
            "to": _addresses(config),
            "to_reviewers": boolean(config, "to_reviewers", default=False),
            "subject_prefix": text(config, "subject_prefix", default="[mcptasks]", max_length=50),
        }
        if not cleaned["to"] and not cleaned["to_reviewers"]:
            raise ConfigError("to", "name at least one address, or turn on to_reviewers")
        from_email = config.get("from_email")
        if from_email not in (None, ""):
            cleaned["from_email"] = _address(from_email, "from_email")
        return cleaned

    def render(self, config: Mapping[str, Any], message: Message) -> EmailMessage | None:
        """The mail for ``message``, or None when it has nobody to go to."""
        to = list(config["to"])
        if config["to_reviewers"]:
            to += [address for address in message.recipients if address]
        to = list(dict.fromkeys(to))
        if not to:
            return None
        item = notice(message)
        prefix = config["subject_prefix"]
        prefix = prefix if prefix.endswith(" ") else prefix + " "
        return EmailMessage(
            subject=f"{prefix}{item.subject}".strip(),
            body=body(item, message),
            from_email=config.get("from_email") or settings.DEFAULT_FROM_EMAIL,
            to=to,
            headers={"X-Mcptasks-Event-Id": message.id},
        )

    def send(
        self,
        config: Mapping[str, Any],
        secret: str | None,
        messages: Sequence[Message],
        *,
        timeout: float,
    ) -> None:
        config = recheck(self.clean_config, config)
        mails = [mail for mail in (self.render(config, message) for message in messages) if mail]
        if not mails:
            return
        try:
            connection = get_connection(fail_silently=False, timeout=timeout)
            connection.send_messages(mails)
        except smtplib.SMTPRecipientsRefused as error:
            codes = sorted({code for code, _ in error.recipients.values()})
            raise DeliveryError(
                f"mail server refused every recipient (SMTP {', '.join(map(str, codes))})",
                retryable=all(400 <= code < 500 for code in codes),
            ) from None
        except smtplib.SMTPAuthenticationError as error:
            raise DeliveryError(
                f"mail server refused the login (SMTP {error.smtp_code})", retryable=False
            ) from None
        except smtplib.SMTPResponseException as error:
            raise DeliveryError(
                f"mail server answered {error.smtp_code}: {_smtp_text(error.smtp_error)}",
                retryable=not 500 <= error.smtp_code < 600,
            ) from None
        except TimeoutError:
            raise DeliveryError(f"mail server: timed out after {timeout:g} s") from None
        except (smtplib.SMTPException, OSError) as error:
            raise DeliveryError(
                f"mail server: {type(error).__name__}: {short(str(error), 200)}"
            ) from None


def _smtp_text(value: bytes | str) -> str:
    raw = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return short(raw, 200)


SINK = EmailSink()
