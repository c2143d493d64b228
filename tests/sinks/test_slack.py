"""Slack destinations against a local HTTP server speaking the incoming-webhook protocol."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from mcptasks.sinks import ConfigError, DeliveryError, Message, get
from tests.sinks.conftest import WHEN, HttpReceiver, Request, approval_message, free_port, json_body

SINK = get("slack")
HOOK_PATH = "/services/T0ACME0001/B0DEPLOY01/q8Zk3LmN0pQrStUvWxYz1234"


def slack_ok(request: Request) -> tuple[int, bytes]:
    if request.path != HOOK_PATH:
        return 404, b"no_service"
    return 200, b"ok"


def hook(receiver: HttpReceiver) -> str:
    return receiver.url + HOOK_PATH


def test_an_approval_request_posts_text_and_blocks_with_a_button_to_the_page(
    http_receivers: Callable[..., HttpReceiver],
) -> None:
    receiver = http_receivers(slack_ok)
    config = SINK.clean_config({"mention": "<!subteam^S0RELEASE>"})
    SINK.send(config, hook(receiver), [approval_message()], timeout=5)
    (request,) = receiver.requests
    assert request.headers["Content-Type"] == "application/json"
    body = json_body(request)
    assert body["text"] == "<!subteam^S0RELEASE> Approval requested: deploy"
    kinds = [block["type"] for block in body["blocks"]]
    assert kinds == ["header", "section", "section", "actions", "context"]
    assert body["blocks"][0]["text"] == {"type": "plain_text", "text": "Approval requested"}
    assert body["blocks"][1]["text"]["text"] == "*deploy* · task `t-9` · tenant acme"
    fields = [field["text"] for field in body["blocks"][2]["fields"]]
    assert "*service*\napi" in fields
    assert "*environment*\nproduction" in fields
    (button,) = body["blocks"][3]["elements"]
    assert button["type"] == "button"
    assert button["url"] == "https://mcp.example.com/dashboard/tasks/t-9/answer/approve/"
    assert button["text"]["text"] == "Open in mcptasks"
    assert button["style"] == "primary"
    assert "evt-approval-1" in body["blocks"][4]["elements"][0]["text"]


def test_text_from_the_data_cannot_mention_or_link(
    http_receivers: Callable[..., HttpReceiver],
) -> None:
    receiver = http_receivers(slack_ok)
    message = Message(
        id="e1",
        type="task.failed",
        timestamp=WHEN,
        tenant="acme",
        data={"id": "t-1", "tool": "<!channel> & <https://evil.example|click>", "status": "failed"},
    )
    SINK.send(SINK.clean_config({}), hook(receiver), [message], timeout=5)
    body = json_body(receiver.requests[0])
    rendered = str(body)
    assert "<!channel>" not in rendered and "<https://evil" not in rendered
    assert (
        "&lt;!channel&gt; &amp; &lt;https://evil.example|click&gt;"
        in body["blocks"][1]["text"]["text"]
    )
    assert [block["type"] for block in body["blocks"]] == [
        "header",
        "section",
        "section",
        "context",
    ]


@pytest.mark.parametrize(
    ("status", "retryable"), [(500, True), (503, True), (429, True), (408, True)]
)
def test_5xx_and_429_are_retried(
    http_receivers: Callable[..., HttpReceiver], status: int, retryable: bool
) -> None:
    receiver = http_receivers(lambda request: (status, b"rate_limited"))
    with pytest.raises(DeliveryError) as caught:
        SINK.send(SINK.clean_config({}), hook(receiver), [approval_message()], timeout=5)
    assert caught.value.retryable is retryable
    assert caught.value.reason == f"Slack answered {status}: rate_limited"


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, b"invalid_payload"),
        (403, b"action_prohibited"),
        (404, b"no_service"),
        (410, b"channel_is_archived"),
    ],
)
def test_other_failures_are_not_retried(
    http_receivers: Callable[..., HttpReceiver], status: int, body: bytes
) -> None:
    receiver = http_receivers(lambda request: (status, body))
    with pytest.raises(DeliveryError) as caught:
        SINK.send(SINK.clean_config({}), hook(receiver), [approval_message()], timeout=5)
    assert caught.value.retryable is False
    assert body.decode() in caught.value.reason


def test_the_webhook_url_never_appears_in_a_reason(
    http_receivers: Callable[..., HttpReceiver],
) -> None:
    echo = http_receivers(lambda request: (404, f"no hook at {request.path}".encode()))
    down = f"http://127.0.0.1:{free_port()}{HOOK_PATH}"
    reasons = []
    for secret in (hook(echo), down, "https://hooks.slack.com/services/T0/B0/secret with spaces"):
        with pytest.raises(DeliveryError) as caught:
            SINK.send(SINK.clean_config({}), secret, [approval_message()], timeout=2)
        reasons.append(caught.value.reason)
        assert secret not in caught.value.reason
        assert HOOK_PATH not in caught.value.reason
        assert "secret with spaces" not in caught.value.reason
    assert reasons[0] == "Slack answered 404: no hook at [secret]"
    assert reasons[1].startswith("Slack: ConnectError")


def test_a_receiver_that_is_down_is_a_retryable_failure() -> None:
    with pytest.raises(DeliveryError) as caught:
        SINK.send(
            SINK.clean_config({}),
            f"http://127.0.0.1:{free_port()}{HOOK_PATH}",
            [approval_message()],
            timeout=2,
        )
    assert caught.value.retryable is True


@pytest.mark.parametrize(
    "secret",
    [None, "", "hooks.slack.com/services/x", "http://hooks.slack.com/services/x", "ftp://x/y"],
)
def test_a_missing_or_unusable_webhook_url_is_not_retried(secret: str | None) -> None:
    with pytest.raises(DeliveryError) as caught:
        SINK.send(SINK.clean_config({}), secret, [approval_message()], timeout=2)
    assert caught.value.retryable is False
    assert caught.value.reason.startswith("the webhook URL ")


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"mention": "@here"}, "mention"),
        ({"mention": "<https://evil.example>"}, "mention"),
        ({"button_label": "x" * 76}, "button_label"),
        ({"button_label": 3}, "button_label"),
        ({"channel": "#general"}, "channel"),
        ({"webhook_url": "https://hooks.slack.com/services/x"}, "webhook_url"),
    ],
)
def test_each_bad_field_is_named(config: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        SINK.clean_config(config)
    assert caught.value.field == field


def test_the_sink_declares_its_secret() -> None:
    assert SINK.secret_required is True
    assert SINK.secret_label == "Webhook URL"
    assert SINK.clean_config({}) == {"button_label": "Open in mcptasks"}
