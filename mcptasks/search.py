"""What the dashboard's task search reads: a task's redacted, lower-cased searchable text.

Two columns, each with a trigram index on PostgreSQL (migration 0004): ``search_summary``, the
redacted scalar values of the task's arguments (set once, at creation), and ``search_status``,
its redacted status message (set with every status message, by ``lifecycle``). The search
never reads the raw arguments or status message, so it cannot find a secret.
"""

from __future__ import annotations

from typing import Any

from audit.redact import REDACTED, redact, redact_text

SUMMARY_CHARS = 1000
STATUS_CHARS = 2000
# Shorter terms cannot use a trigram index: they match ids only.
MIN_TEXT_TERM = 3


def _leaves(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [leaf for key in sorted(value) for leaf in _leaves(value[key])]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item)]
    if value is None or isinstance(value, bool) or value == REDACTED:
        return []
    return [str(value)]


def summary_text(arguments: Any, sensitive_keys: frozenset[str] = frozenset()) -> str:
    """The searchable summary of a task's arguments: their redacted scalar values."""
    shown = redact(arguments, sensitive_keys=sensitive_keys, max_bytes=SUMMARY_CHARS * 4)
    return " ".join(_leaves(shown)).lower()[:SUMMARY_CHARS]


def status_text(message: str) -> str:
    """The searchable form of a status message: redacted, lower-cased."""
    return redact_text(message or "").lower()[:STATUS_CHARS]
