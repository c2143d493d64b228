"""Fixtures of the outbox tests: a local webhook receiver and a destination of amy's (the acme
admin) pointing at it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from audit.record import Actor
from mcptasks.outbox import destinations, subscriptions
from mcptasks.sinks.webhook import new_secret
from tests.outbox.receiver import Receiver

ALL_TASK_EVENTS = list(subscriptions.TASK_EVENTS)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver().start()
    yield server
    server.stop()


@pytest.fixture
def secret() -> str:
    return new_secret()


@pytest.fixture(autouse=True)
def fresh_subscriptions() -> Iterator[None]:
    subscriptions.forget()
    yield
    subscriptions.forget()


@pytest.fixture
def webhook(cast: dict[str, dict[str, Any]], receiver: Receiver, secret: str) -> Callable[..., Any]:
    """``webhook(events=[...])`` → a destination of acme, created by amy, to the receiver."""

    def make(events: list[str] | None = None, name: str = "hooks", **options: Any) -> Any:
        amy = cast["amy"]["user"]
        return destinations.create(
            tenant=cast["amy"]["tenant"],
            actor=Actor.for_user(amy),
            created_by=amy,
            name=name,
            kind="webhook",
            config={"url": options.pop("url", receiver.url)},
            secret=options.pop("secret", secret),
            events=events or ALL_TASK_EVENTS,
            **options,
        )

    return make
