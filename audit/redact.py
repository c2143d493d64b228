"""The one redactor every audit payload (and log event) passes through (DESIGN §7).

:func:`redact` returns a redacted copy of a JSON-like value, :func:`redact_text` redacts one
string, :func:`redact_mapping` redacts a log event (no size cap), :func:`is_sensitive_key` says
whether a key name is treated as secret. Redaction replaces, never removes: a secret becomes
``[REDACTED]`` so a reader can see something was there.

**Sensitive key names.** A key is split into lower-case word parts on ``_``, ``-``, ``.``, spaces,
digits and camelCase humps (``dbPassword`` → db, password; ``X-Api-Key`` → x, api, key;
``aws_secret_access_key`` → aws, secret, access, key). The key is sensitive when

- a part contains ``password``, ``passwd``, ``passphrase``, ``passcode``, ``secret`` (not
  ``secretary``), ``credential``, ``authorization``/``authorisation``, ``cookie``, or a run-together
  ``apikey``, ``privatekey``, ``accesskey``, ``sessionid``, ``sessid``, ``authtoken``…
  (``PHPSESSID``, ``clientsecret``, ``csrftoken``);
- a part is ``pass``, ``pwd``, ``pw``, ``cvv``, ``cvc``, ``otp``, ``totp``, ``jwt``, ``bearer``,
  ``sig``, or the last part is ``auth`` (``auth``, ``basic_auth``, ``X-Auth``);
- two adjacent parts name a key or session: ``api key``, ``private key``, ``access key``,
  ``signing key``, ``client key``, ``account key``, ``session id``, ``session key``,
  ``card number``, ``credit card``, ``security code``, ``shared access``, ``amz signature``…;
- a part is ``token``/``tokens`` or ends in ``token`` (``refresh_token``, ``idToken``).

It is *not* sensitive — it names something about a secret, not the secret — when

- its last part is a metadata word: count, length, limit, size, type, kind, format, policy,
  expiry/expires/expiration, ttl, at, name, ref, arn, path, file, version, label, url, uri,
  endpoint (``token_count``, ``password_min_length``, ``client_secret_expires_at``,
  ``secretName``, ``private_key_path``);
- or, for token words only, another part is a quantity or protocol qualifier (max, min, num,
  total, input, output, prompt, completion, cached, reasoning, used, remaining, budget, usage, per,
  context, page, next, continuation, sync, progress, idempotency, cancellation, cursor) or the
  last part is an identifier (id, lookup, prefix, scope, owner, issuer): ``max_tokens``,
  ``maxTokens`` (MCP sampling), ``input_tokens``, ``progressToken`` (MCP ``_meta``),
  ``nextPageToken``, ``token_id``. ``tokenizer`` and a bare ``key`` (``idempotency_key``,
  ``primary_key``, ``public_key``) are not sensitive at all.

Names a tool declares sensitive (``sensitive_keys``) match exactly, ignoring case and separator
style (``apiKey`` = ``api_key`` = ``API-KEY``), with no exemptions. The whole value of a sensitive
key is replaced, whatever it is (string, number, list, dict), except ``None`` and booleans, which
cannot hold a secret. The same rule applies to ``{"name": "DB_PASSWORD", "value": "…"}`` entries
(k8s env, HAR headers, tags), ``[["Authorization", "…"]]`` pair lists, and command lines given
as lists (``["--password", "…"]``).

**Sensitive values**, found inside any string (values, list items, dict keys, free text such as
error messages) by two pre-compiled regex passes per string (see "values in text" below):

- PEM private keys (RSA, EC, OPENSSH, ENCRYPTED, PGP …; an unterminated block to the end);
- URLs with a password: ``postgres://app:S3cr3t!@db/x`` → ``postgres://app:[REDACTED]@db/x``;
- ``Bearer <token>`` (not prose: the token needs a digit or symbol, or 24+ characters) and
  ``Basic <base64>`` when it decodes to ``user:password``;
- JWTs (and JWEs), AWS access key ids (AKIA/ASIA/ABIA/ACCA/A3T…), Google API keys (AIza…),
  OAuth access tokens (ya29.…) and client secrets (GOCSPX-…), GitHub (ghp_/gho_/ghu_/ghs_/ghr_,
  github_pat_), GitLab (glpat-), Slack (xoxb-/xoxp-/xoxa-/…, xapp-, webhook URLs), Stripe
  (sk_live_/sk_test_/rk_…, whsec_), OpenAI/Anthropic (sk-…), npm, PyPI, HashiCorp Vault,
  SendGrid, Shopify and age keys, and this project's API tokens ``mcpt_<lookup>_<secret>``
  (the lookup, which is not secret, is kept: ``mcpt_0123456789ab_[REDACTED]``);
- card numbers: 13–19 digits, bare or grouped by spaces or dashes, starting with 2–6 (the
  issuer ranges in use) and passing the Luhn check — so phone numbers, epoch timestamps, UUID and
  hex digests survive; integers are checked the same way;
- ``key=value``, ``key: value``, ``<key=value>``, ``key=<value>``, ``path/key=value``,
  ``"key": "value"`` (also JSON escaped inside JSON),
  ``<key>value</key>``, ``--key value``, ``"--key", "value"`` and ``"KEY", "value": "…"``
  where the key is sensitive by the rules above (AWS secret keys next to their name, query
  strings, headers, config files, Python reprs and JSON dumps in error messages); a
  ``Cookie:`` header loses the rest of its line.

Harmless look-alikes are kept: UUIDs, hex digests, commit shas, timestamps, phone numbers, plain
URLs, and the words "token" or "password" in prose. The limits, by design: a secret with no
known shape and no sensitive name next to it (a bare random password in prose) is not found —
there is no entropy guessing, which would eat digests and ids; and prose that reads like an
assignment loses a word ("Password: must be long" → "Password: [REDACTED] be long").

**Size cap.** If the redacted value, as compact UTF-8 JSON, exceeds ``max_bytes``, :func:`redact`
returns a small stub instead — ``{"truncated": true, "bytes": <size of the payload before
redaction>, "max_bytes": …, "type": "object", "keys": [top-level key names]}`` — never a cut
string, so a secret can never survive half-cut. The walk stops as soon as the output is known to
be too large, so huge payloads cost little.

**Output** is always a value that ``json`` and RFC 8785 accept (the audit chain hashes it):
string keys, tuples and sets as lists, integers beyond ±2⁵³ and non-finite floats as strings,
dates as ISO 8601, bytes as a placeholder, unpaired surrogates replaced, nesting deeper than
``MAX_DEPTH`` replaced by a marker.

The key rules live in audit.redact_keys, the text passes in audit.redact_text; this module walks
structures and is where every caller imports from.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import math
import uuid
from collections.abc import Collection, Mapping, Set
from decimal import Decimal
from typing import Any

from audit.redact_keys import (
    _CACHE_SIZE,
    _FLAG,
    _NAME_FIELDS,
    _VALUE_FIELDS,
    REDACTED,
    _declared,
    _is_sensitive,
    is_sensitive_key,
)
from audit.redact_text import _is_card, _redact_text, redact_text

__all__ = ["MAX_DEPTH", "REDACTED", "is_sensitive_key", "redact", "redact_mapping", "redact_text"]


TOO_DEEP = "[TRUNCATED: nested too deep]"
MAX_DEPTH = 64
_SAFE_INT = 2**53 - 1
_STUB_KEYS = 20
_STUB_KEY_CHARS = 64

# ---------------------------------------------------------------- structures


class _TooLarge(Exception):
    pass


# Cleaned dict keys, by (key, declared names): keys repeat across a payload's records. Only
# keys that hold no secret are kept, so the cache never prolongs a secret's life in memory.
_KEY_CACHE: dict[tuple[str, frozenset[str]], tuple[str, bool]] = {}


def _clean_key(key: str, declared: frozenset[str]) -> tuple[str, bool]:
    """(the key with secrets in it redacted, whether its value is secret)."""
    cached = _KEY_CACHE.get((key, declared))
    if cached is not None:
        return cached
    cleaned = _valid_utf8(_redact_text(key, declared))
    # Judged on the cleaned key too, so that redacting twice changes nothing.
    result = (
        cleaned,
        _is_sensitive(key, declared) or (cleaned != key and _is_sensitive(cleaned, declared)),
    )
    if result[0] == key and len(key) <= 200:
        if len(_KEY_CACHE) >= _CACHE_SIZE:
            _KEY_CACHE.clear()
        _KEY_CACHE[(key, declared)] = result
    return result


class _Walker:
    """One redaction pass over a value, giving up once its output exceeds ``budget`` bytes."""

    def __init__(self, declared: frozenset[str], budget: float) -> None:
        self.declared = declared
        self.budget = budget
        self.spent = 0  # a lower bound of the output's JSON size

    def _spend(self, amount: int) -> None:
        self.spent += amount
        if self.spent > self.budget:
            raise _TooLarge

    def text(self, text: str) -> str:
        cleaned = _valid_utf8(_redact_text(text, self.declared) if len(text) > 2 else text)
        self._spend(len(cleaned) + 3)
        return cleaned

    def value(self, value: Any, depth: int = 0) -> Any:
        kind = type(value)
        if kind is str:
            return self.text(value)
        if kind is dict or kind is list:
            if depth >= MAX_DEPTH:
                return self.text(TOO_DEEP)
            return (
                self.mapping(value, depth + 1) if kind is dict else self.sequence(value, depth + 1)
            )
        if value is None or kind is bool:
            self._spend(5)
            return value
        if kind is int:
            return self.integer(value)
        return self.other(value, depth)

    def other(self, value: Any, depth: int) -> Any:
        """Subclasses of the JSON types, floats, and values JSON has no type for."""
        if isinstance(value, str):
            return self.text(str(value))
        if isinstance(value, bool):
            return self.value(bool(value))
        if isinstance(value, int):
            return self.integer(int(value))
        if isinstance(value, float):
            if value != value or value in (math.inf, -math.inf):
                return self.text(json.dumps(value))
            self._spend(4)
            return float(value)
        if isinstance(value, Mapping | list | tuple | Set):
            if depth >= MAX_DEPTH:
                return self.text(TOO_DEEP)
            if isinstance(value, Mapping):
                return self.mapping(value, depth + 1)
            return self.sequence(list(value), depth + 1)
        return self.text(_scalar_text(value))

    def integer(self, value: int) -> Any:
        digits = str(abs(value))
        if len(digits) >= 13 and _is_card(digits):
            return self.text(REDACTED)
        if abs(value) > _SAFE_INT:
            return self.text(str(value))
        self._spend(len(digits) + 1)
        return value

    def secret(self, value: Any) -> Any:
        """The value of a sensitive key: replaced whole, unless it cannot hold a secret."""
        if value is None or isinstance(value, bool):
            self._spend(6)
            return value
        return self.text(REDACTED)

    def mapping(self, mapping: Mapping[Any, Any], depth: int) -> dict[str, Any]:
        self._spend(2)
        value_is_secret = len(mapping) <= 4 and self._names_secret(mapping)
        result: dict[str, Any] = {}
        for raw_key, item in mapping.items():
            key = raw_key if type(raw_key) is str else _key_text(raw_key)
            out_key, sensitive = _clean_key(key, self.declared)
            self._spend(len(out_key) + 3)
            while out_key in result:  # two keys redacted (or stringified) alike
                out_key += "~"
            if sensitive or (value_is_secret and key.lower() in _VALUE_FIELDS):
                result[out_key] = self.secret(item)
            else:
                result[out_key] = self.value(item, depth)
        return result

    def _names_secret(self, mapping: Mapping[Any, Any]) -> bool:
        """``{"name": "DB_PASSWORD", "value": …}``: the value field holds a secret."""
        if not any(isinstance(key, str) and key.lower() in _VALUE_FIELDS for key in mapping):
            return False
        return any(
            isinstance(key, str)
            and key.lower() in _NAME_FIELDS
            and isinstance(name, str)
            and _is_sensitive(name, self.declared)
            for key, name in mapping.items()
        )

    def sequence(self, items: list[Any], depth: int) -> list[Any]:
        self._spend(2)
        pairs = bool(items) and all(
            isinstance(item, list | tuple) and len(item) == 2 and isinstance(item[0], str)
            for item in items
        )
        result: list[Any] = []
        secret_next = False
        for item in items:
            if pairs and _is_sensitive(item[0], self.declared):
                result.append([self.text(item[0]), self.secret(item[1])])
            elif secret_next and isinstance(item, str | int | float) and not isinstance(item, bool):
                result.append(self.secret(item))
            else:
                result.append(self.value(item, depth))
            secret_next = type(item) is str and item[:1] == "-" and self._is_secret_flag(item)
        return result

    def _is_secret_flag(self, item: str) -> bool:
        """``--password`` (its value is the next list item); ``--password=x`` is text."""
        flag = _FLAG.fullmatch(item)
        return flag is not None and _is_sensitive(flag.group(1), self.declared)


def _key_text(key: Any) -> str:
    if key is None or isinstance(key, bool):
        return json.dumps(key)
    return _scalar_text(key)


def _scalar_text(value: Any) -> str:
    """A non-JSON scalar as text (which is then scanned like any string)."""
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID | Decimal):
        return str(value)
    if isinstance(value, enum.Enum):
        return _scalar_text(value.value)
    if isinstance(value, bytes | bytearray | memoryview):
        return f"[binary: {len(value)} bytes]"
    try:
        return str(value)
    except Exception:  # a broken __str__ must not break auditing
        return f"[unprintable {type(value).__name__}]"


def _valid_utf8(text: str) -> str:
    """``text`` with unpaired surrogates replaced: neither UTF-8 nor RFC 8785 accepts them."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def _payload_size(value: Any) -> int | None:
    try:
        encoded = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError, RecursionError):
        return None
    return len(encoded.encode("utf-8", "replace"))


def _stub(value: Any, max_bytes: int) -> dict[str, Any]:
    """What replaces a payload over the cap: its size and shape, never a piece of it."""
    stub: dict[str, Any] = {
        "truncated": True,
        "bytes": _payload_size(value),
        "max_bytes": max_bytes,
        "type": "object"
        if isinstance(value, Mapping)
        else "array"
        if isinstance(value, list | tuple | Set)
        else "string",
    }
    if isinstance(value, Mapping):
        keys = []
        for key in list(value)[:_STUB_KEYS]:
            text = key if isinstance(key, str) else _key_text(key)
            if len(text) <= _STUB_KEY_CHARS and _redact_text(text, frozenset()) == text:
                keys.append(_valid_utf8(text))
        stub["keys"] = keys
    return stub


def redact(
    value: Any, *, sensitive_keys: frozenset[str] | set[str] = frozenset(), max_bytes: int = 16384
) -> Any:
    """Return a redacted, JSON-safe copy of ``value``; a stub if it exceeds ``max_bytes``.

    ``sensitive_keys`` are argument names a tool declares secret (matched at any depth).
    """
    walker = _Walker(_declared(sensitive_keys), max_bytes)
    try:
        cleaned = walker.value(value)
    except _TooLarge:
        return _stub(value, max_bytes)
    encoded = json.dumps(cleaned, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    if len(encoded) > max_bytes:
        return _stub(value, max_bytes)
    return cleaned


def redact_mapping(
    mapping: Mapping[str, Any], *, sensitive_keys: Collection[str] = frozenset()
) -> dict[str, Any]:
    """Return a redacted copy of a log event or other mapping, with no size cap."""
    walker = _Walker(_declared(sensitive_keys), math.inf)
    return walker.mapping(mapping, 1)
