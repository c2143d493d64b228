"""Slack incoming webhooks (docs/destinations.md, "Slack").

The webhook URL is the destination's secret (whoever holds it may post to the channel). Each
message is one POST of ``{"text", "blocks"}``: a header, the task and tool, the summary fields
and a button linking to ``Message.url``; ``text`` is the fallback notifications show. Slack
answers ``ok``; 5xx, 408 and 429 are retried, any other status (``invalid_payload``,
``no_service``, ``channel_is_archived``) is not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mcptasks.sinks import ConfigError, DeliveryError, Message, Sink
from mcptasks.sinks._common import (
    check_fields,
    dumps,
    http_url,
    notice,
    post,
    recheck,
    scrub,
    short,
    status_retryable,
    text,
)

FIELDS = ("button_label", "mention")
MAX_SECTION_FIELDS = 10  # Slack's limit on a section's fields
# What may stand before the message: a user, group or channel mention in Slack's syntax.
MENTION = r"<(!here|!channel|!subteam\^[A-Z0-9]+|@[UW][A-Z0-9]+)>"


def mrkdwn(value: str) -> str:
    """Text as Slack mrkdwn shows it literally: &, < and > escaped (no links, no mentions)."""
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def payload(config: Mapping[str, Any], message: Message) -> dict[str, Any]:
    item = notice(message)
    about = " · ".join(
        part
        for part in (
            f"*{mrkdwn(item.tool)}*" if item.tool else "",
            f"task `{mrkdwn(item.task_id)}`" if item.task_id else "",
            f"tenant {mrkdwn(message.tenant)}",
        )
        if part
    )
    mention = config.get("mention")
    fallback = short(f"{item.title}: {item.tool or message.type}", 150)
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": short(item.title, 150)}},
        {"type": "section", "text": {"type": "mrkdwn", "text": short(about, 3000)}},
    ]
    if item.fields:
        blocks.append(
            {
                "type": "section",
                "fields": [
                    {"type": "mrkdwn", "text": f"*{mrkdwn(label)}*\n{mrkdwn(value)}"[:2000]}
                    for label, value in item.fields[:MAX_SECTION_FIELDS]
                ],
            }
        )
    if item.url:
        blocks.append(
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": config["button_label"]},
                        "url": item.url[:3000],
                        "action_id": "open",
                        **({"style": "primary"} if message.type == "approval.requested" else {}),
                    }
                ],
            }
        )
    blocks.append(
        {
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": mrkdwn(f"{message.type} · {message.id}")}],
        }
    )
    return {
        "text": f"{mention} {mrkdwn(fallback)}" if mention else mrkdwn(fallback),
        "blocks": blocks,
    }


class SlackSink(Sink):
    kind = "slack"
    label = "Slack (incoming webhook)"
    secret_label = "Webhook URL"
    secret_required = True
    max_batch = 1  # one chat message per POST

    def clean_config(self, config: Mapping[str, Any]) -> dict[str, Any]:
        check_fields(config, FIELDS)
        cleaned: dict[str, Any] = {
            "button_label": text(config, "button_label", default="Open in mcptasks", max_length=75)
        }
        mention = text(
            config,
            "mention",
            max_length=40,
            pattern=MENTION,
            pattern_help="must be <!here>, <!channel>, <!subteam^ID> or <@USERID>",
        )
        if mention is not None:
            cleaned["mention"] = mention
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
        url = (secret or "").strip()
        try:
            http_url(url, "webhook URL")
        except ConfigError as error:
            # The URL itself is the secret: the reason names what is wrong, never the value.
            raise DeliveryError(f"the {error.field} {error.message}", retryable=False) from None
        for message in messages:
            response = post(
                url,
                content=dumps(payload(config, message)).encode(),
                headers={"Content-Type": "application/json"},
                timeout=timeout,
                what="Slack",
                secrets=[url],
            )
            if response.status_code == 200:
                continue
            answer = scrub(short(response.text, 200), [url]) or "(no body)"
            raise DeliveryError(
                f"Slack answered {response.status_code}: {answer}",
                retryable=status_retryable(response.status_code),
            )


SINK = SlackSink()
