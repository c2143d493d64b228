"""Where events leave the system: one module per kind of destination.

A destination (configured per tenant by its admins, see ``mcptasks.outbox``) names a *kind*; the
kind is a module of this package that defines ``SINK``, an instance of a :class:`Sink` subclass.
The outbox hands a sink a batch of :class:`Message` values, already redacted, together with the
destination's (non-secret) config and its decrypted secret; the sink renders them in its wire
format and sends them, or raises :class:`DeliveryError`. Sinks keep no state and never log a
secret or a payload.

Modules are found by name: adding ``mcptasks/sinks/<kind>.py`` with a ``SINK`` adds the kind.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any, ClassVar


@dataclass(frozen=True)
class Message:
    """One event on its way out. ``id`` is stable across retries: receivers de-duplicate on it."""

    id: str
    type: str  # "task.created", "task.status_changed", "approval.requested", "audit.event", ...
    timestamp: datetime  # when the event happened (aware, UTC)
    tenant: str  # tenant slug
    data: Mapping[str, Any]  # JSON-able and already redacted
    # Where a human reader goes from a notification (an approval page), when there is one.
    url: str | None = None
    # For reviewer notifications: the e-mail addresses of the people who may decide.
    recipients: tuple[str, ...] = field(default=())


class ConfigError(ValueError):
    """A destination's config (or secret) is not acceptable; ``field`` names the bad entry."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


class DeliveryError(Exception):
    """A send failed. ``retryable=False`` when trying again cannot help (a 4xx other than 408/429,
    a refused certificate): the outbox dead-letters such a delivery at once. ``reason`` is shown in
    the delivery log, so it must not contain a secret or a payload."""

    def __init__(self, reason: str, *, retryable: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable


class Sink:
    """One kind of destination. Subclasses set the class attributes and implement both methods."""

    kind: ClassVar[str]  # the module name, e.g. "webhook"
    label: ClassVar[str]  # shown in the dashboard, e.g. "HTTPS webhook (Standard Webhooks)"
    # The label of the one secret this kind needs ("Signing secret", "HEC token"), or None.
    secret_label: ClassVar[str | None] = None
    secret_required: ClassVar[bool] = False
    # How many messages one ``send`` may carry (audit streams batch; webhooks send one).
    max_batch: ClassVar[int] = 1

    def clean_config(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Validate and normalise the non-secret config; raise :class:`ConfigError`."""
        raise NotImplementedError

    def send(
        self,
        config: Mapping[str, Any],
        secret: str | None,
        messages: Sequence[Message],
        *,
        timeout: float,
    ) -> None:
        """Deliver ``messages`` in order, or raise :class:`DeliveryError`."""
        raise NotImplementedError


@cache
def sinks() -> dict[str, Sink]:
    """Every kind of destination this build knows, by kind."""
    found: dict[str, Sink] = {}
    for module_info in pkgutil.iter_modules(__path__):
        if module_info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        sink = getattr(module, "SINK", None)
        if isinstance(sink, Sink):
            found[sink.kind] = sink
    return dict(sorted(found.items()))


def get(kind: str) -> Sink:
    """The sink of ``kind``; ``KeyError`` when this build has no such kind."""
    return sinks()[kind]
