"""The one redactor every audit payload (and log line) passes through."""

from __future__ import annotations

import json
import re
from typing import Any

REDACTED = "[REDACTED]"

SENSITIVE_KEY = re.compile(
    r"pass(word|wd|phrase)?|secret|token|api[_-]?key|authorization|cookie|private[_-]?key|"
    r"credential|session",
    re.IGNORECASE,
)

SENSITIVE_VALUE = re.compile(
    r"(?i:bearer\s+[A-Za-z0-9._~+/=-]{8,})"
    r"|eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)"
)


def redact_text(text: str) -> str:
    return SENSITIVE_VALUE.sub(REDACTED, text)


def _walk(value: Any, sensitive_keys: frozenset[str] | set[str]) -> Any:
    if isinstance(value, dict):
        return {
            key: REDACTED
            if (isinstance(key, str) and (SENSITIVE_KEY.search(key) or key in sensitive_keys))
            else _walk(item, sensitive_keys)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_walk(item, sensitive_keys) for item in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


def redact(
    value: Any, *, sensitive_keys: frozenset[str] | set[str] = frozenset(), max_bytes: int = 16384
) -> Any:
    """Return a redacted copy of a JSON value, replaced by a stub if it exceeds ``max_bytes``."""
    cleaned = _walk(value, sensitive_keys)
    encoded = json.dumps(cleaned, default=str)
    if len(encoded) > max_bytes:
        return {"truncated": True, "bytes": len(encoded), "preview": encoded[: max_bytes // 4]}
    return cleaned
