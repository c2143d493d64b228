"""Sensitive key names (audit.redact's rules, in its docstring): :func:`is_sensitive_key` and
the helpers the text and structure passes share."""

from __future__ import annotations

import itertools
import re
from collections.abc import Collection

REDACTED = "[REDACTED]"

# ---------------------------------------------------------------- key names

_KEY_PART = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_STRONG_PART = re.compile(
    r"pass(?:word|wd|phrase|code)|secret(?!ar)|credential|authori[sz]ation|cookie"
    r"|(?:api|private|access|auth|signing|encryption|master|session|secret)key"
    r"|sess(?:ion)?id|clientsecret"
)
_STRONG_WHOLE = frozenset(
    {"pass", "pwd", "pw", "cvv", "cvc", "otp", "totp", "hotp", "jwt", "bearer", "sig"}
)
_STRONG_PAIRS = frozenset(
    {
        ("api", "key"),
        ("private", "key"),
        ("access", "key"),
        ("signing", "key"),
        ("encryption", "key"),
        ("master", "key"),
        ("account", "key"),
        ("auth", "key"),
        ("client", "key"),
        ("license", "key"),
        ("ssh", "key"),
        ("app", "key"),
        ("consumer", "key"),
        ("storage", "key"),
        ("subscription", "key"),
        ("session", "id"),
        ("session", "key"),
        ("card", "number"),
        ("credit", "card"),
        ("security", "code"),
        ("shared", "access"),
        ("amz", "signature"),
        ("auth", "header"),
    }
)
_METADATA_LAST = frozenset(
    {
        "count",
        "counts",
        "length",
        "len",
        "limit",
        "limits",
        "size",
        "type",
        "types",
        "kind",
        "format",
        "policy",
        "expiry",
        "expires",
        "expiration",
        "ttl",
        "at",
        "name",
        "names",
        "ref",
        "arn",
        "path",
        "file",
        "version",
        "label",
        "url",
        "uri",
        "endpoint",
    }
)
_PLURALS = {"keys": "key", "ids": "id", "numbers": "number", "codes": "code", "cards": "card"}
_TOKEN_QUALIFIERS = frozenset(
    {
        "max",
        "min",
        "num",
        "total",
        "input",
        "output",
        "prompt",
        "completion",
        "cached",
        "cache",
        "reasoning",
        "used",
        "remaining",
        "budget",
        "usage",
        "per",
        "context",
        "page",
        "next",
        "pagination",
        "continuation",
        "sync",
        "progress",
        "idempotency",
        "cancellation",
        "cursor",
    }
)
_TOKEN_ID_LAST = frozenset({"id", "ids", "lookup", "prefix", "scope", "scopes", "owner", "issuer"})
_NAME_FIELDS = frozenset({"name", "key", "header", "field", "param", "parameter", "variable"})
_VALUE_FIELDS = frozenset({"value", "val"})
_FLAG = re.compile(r"--?([A-Za-z][A-Za-z0-9_.-]*)")
_DIGIT = re.compile(r"[0-9]")
_CACHE_SIZE = 8192
_NAME_CACHE: dict[str, tuple[str, bool]] = {}


def _parts(name: str) -> list[str]:
    parts = [part.lower() for part in _KEY_PART.findall(name)]
    # "OAuth" splits as o + auth; it is one word.
    for index in range(len(parts) - 1):
        if parts[index] == "o" and parts[index + 1] == "auth":
            parts[index : index + 2] = ["oauth"]
            break
    return parts


def _key_info(name: str) -> tuple[str, bool]:
    """(normalized name, sensitive by the built-in rules) for a key name."""
    info = _NAME_CACHE.get(name)
    if info is None:
        info = _key_rules(name)
        # Names repeat, so they are cached; but a "name" found in text may be a random token,
        # and the cache must not keep secrets alive: names with digits (as random tokens
        # nearly always have) or longer than 64 characters are not cached.
        if len(name) <= 64 and _DIGIT.search(name) is None:
            if len(_NAME_CACHE) >= _CACHE_SIZE:
                _NAME_CACHE.clear()
            _NAME_CACHE[name] = info
    return info


def _key_rules(name: str) -> tuple[str, bool]:
    parts = _parts(name)
    normalized = "_".join(parts)
    if not parts:
        return normalized, False
    singular = [_PLURALS.get(part, part) for part in parts]
    strong = (
        any(_STRONG_PART.search(part) or part in _STRONG_WHOLE for part in parts)
        or parts[-1] == "auth"
        or any(pair in _STRONG_PAIRS for pair in itertools.pairwise(singular))
    )
    tokenish = any(part in ("token", "tokens") or part.endswith("token") for part in parts)
    if not (strong or tokenish) or parts[-1] in _METADATA_LAST:
        return normalized, False
    if strong:
        return normalized, True
    harmless = parts[-1] in _TOKEN_ID_LAST or any(part in _TOKEN_QUALIFIERS for part in parts)
    return normalized, not harmless


def _declared(sensitive_keys: Collection[str]) -> frozenset[str]:
    return frozenset(_normalize(name) for name in sensitive_keys)


def _normalize(name: str) -> str:
    return _key_info(name)[0]


def is_sensitive_key(name: str, sensitive_keys: Collection[str] = frozenset()) -> bool:
    """Whether a value under key ``name`` is replaced whole (see the module docstring)."""
    return _is_sensitive(name, _declared(sensitive_keys))


def _is_sensitive(name: str, declared: frozenset[str]) -> bool:
    normalized, sensitive = _key_info(name)
    return sensitive or normalized in declared
