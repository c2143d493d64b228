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
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import enum
import functools
import itertools
import json
import math
import re
import uuid
from collections.abc import Collection, Mapping, Set
from decimal import Decimal
from typing import Any

REDACTED = "[REDACTED]"
TOO_DEEP = "[TRUNCATED: nested too deep]"
MAX_DEPTH = 64
_SAFE_INT = 2**53 - 1
_STUB_KEYS = 20
_STUB_KEY_CHARS = 64

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


# ---------------------------------------------------------------- values in text

# Strings are scanned twice, each time with one pre-compiled regex:
#
# 1. The *keyed* pass finds names (key=value, "key": "value", --key value, <key>value</key>).
#    It does not try every separator in the text: it looks only where a stem of a sensitive
#    name occurs (searched in an ASCII-lowered bytes copy, a fast literal search), takes the
#    name around it, and checks the name with the key rules; most text has no stem at all.
# 2. The *token* pass finds secrets by their shape. Every alternative starts with one literal
#    character and any lookbehind comes after it, so the engine skips positions that start no
#    alternative without trying the pattern there (measured ~2.5x faster than leading
#    assertions or character classes). Each entry is (kind, first characters, rest), expanded to
#    one alternative per first character with its groups suffixed by the alternative's index.
#
# The keyed pass runs first so "Authorization: Bearer x" keeps its scheme: "Bearer [REDACTED]".

_NAME_STEMS = (
    "pass",
    "pw",
    "secret",
    "credential",
    "auth",
    "cookie",
    "key",
    "sess",
    "cvv",
    "cvc",
    "otp",
    "jwt",
    "bearer",
    "sig",
    "card",
    "security",
    "shared",
    "token",
)
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_NAME_RUN = re.compile(r"[A-Za-z0-9_.-]{0,81}")
_VALUE = (
    r"(?P<vq>\\+[\"']).*?(?P=vq)"  # \"…\" inside a JSON string (or deeper)
    r"|\"(?:[^\"\\\r\n]|\\.)*\""  # "…"
    r"|'(?:[^'\\\r\n]|\\.)*'"  # '…'
    r"|[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>\\]+"  # a URL, whole
    r"|<[^<>\s]{1,4096}>"  # <…>: "password=<hunter2>"
    r"|(?:(?:Bearer|Basic|Digest|Token|Bot|Negotiate|NTLM|bearer|basic|token)[ \t]+)?"
    r"(?:\[REDACTED\]|[^\s,;&\"'<>(){}\[\]\\]+)"  # already redacted: stays as it is
)
_AFTER_NAME = re.compile(
    r"(?:\\*[\"'])?[ \t]*+(?P<sep>[:=])>?(?!//|=)[ \t]*+(?P<value>" + _VALUE + r")"
)
# "DB_PASSWORD", "value": "…" (name/value entries as text) and "--password", "…" (argv as text).
_AFTER_LISTED_NAME = re.compile(
    r"(?P<q>\\*[\"'])[ \t]*,[ \t]*(?P<label>(?P=q)(?:value|val|Value|VALUE)(?P=q)[ \t]*[:=][ \t]*)?"
    r"(?P<value>(?P=q)(?:(?!(?P=q))[^\r\n])*(?P=q))"
)
_AFTER_FLAG = re.compile(r"[ \t]++(?P<value>[^\s\"'-][^\s\"']*|\"[^\"\r\n]*\"|'[^'\r\n]*')")
_AFTER_XML_NAME = re.compile(r"(?:[ \t][^<>]*)?>(?P<value>[^<]{1,4096})</")
_XML_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_LEADING_QUOTE = re.compile(r"\\*[\"']")
_SCHEME_PREFIX = re.compile(
    r"(?:Bearer|Basic|Digest|Token|Bot|Negotiate|NTLM|bearer|basic|token)[ \t]+"
)

_T = "A-Za-z0-9_-"  # characters tokens are made of; a token is not preceded by one
_TOKENS: list[tuple[str, str, str]] = [
    # PEM private keys; an unterminated block (a truncated key) goes to the end.
    (
        "whole",
        "-",
        r"----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----"
        r"[\s\S]*?(?:-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    ),
    # scheme://user:password@host: the password only.
    ("url", ":", r"//[^\s/:@\"'<>]*+:(?P<cred>[^\s/\"'<>]+)@"),
    ("bearer", "B", r"(?<![A-Za-z0-9_].)(?:earer|EARER)[ \t]++(?P<cred>[A-Za-z0-9._~+/-]{8,}+=*+)"),
    ("bearer", "b", r"(?<![A-Za-z0-9_].)earer[ \t]++(?P<cred>[A-Za-z0-9._~+/-]{8,}+=*+)"),
    (
        "basic",
        "B",
        r"(?<![A-Za-z0-9_].)(?:asic|ASIC)[ \t]++(?P<cred>[A-Za-z0-9+/]{4,}+={0,2}+)"
        r"(?![A-Za-z0-9+/=])",
    ),
    (
        "basic",
        "b",
        r"(?<![A-Za-z0-9_].)asic[ \t]++(?P<cred>[A-Za-z0-9+/]{4,}+={0,2}+)"
        r"(?![A-Za-z0-9+/=])",
    ),
    ("mcpt", "m", rf"(?<![{_T}].)cpt_[0-9a-f]{{6,32}}+_(?P<cred>[{_T}]{{16,}}+)"),
    (
        "whole",
        "e",
        rf"(?<![{_T}].)yJ[{_T}]{{4,}}+\.[{_T}]{{4,}}+\.[{_T}]*+"  # JWT, JWE
        rf"(?:\.[{_T}]++\.[{_T}]++)?",
    ),
    ("whole", "A", r"(?<![A-Z0-9].)(?:KIA|SIA|BIA|CCA|3T[A-Z0-9])[A-Z0-9]{16}(?![A-Z0-9])"),
    ("whole", "A", rf"(?<![{_T}].)Iza[{_T}]{{35}}(?![{_T}])"),
    ("whole", "A", r"GE-SECRET-KEY-1[0-9A-Z]{58}"),
    ("whole", "y", rf"(?<![{_T}].)a29\.[{_T}]{{20,}}+"),
    ("whole", "G", rf"(?<![{_T}].)OCSPX-[{_T}]{{20,}}+"),
    (
        "whole",
        "g",
        rf"(?<![{_T}].)(?:h[pousr]_[A-Za-z0-9]{{36,255}}(?![{_T}])"
        rf"|ithub_pat_[A-Za-z0-9_]{{22,255}}+|lpat-[{_T}]{{20,}}+)",
    ),
    (
        "whole",
        "x",
        rf"(?<![{_T}].)(?:ox[abposr]-[A-Za-z0-9-]{{10,}}+"
        rf"|app-[0-9]-[A-Za-z0-9-]{{10,}}+)",
    ),
    ("whole", "h", r"ttps://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_-]+"),
    ("whole", "h", rf"(?<![{_T}].)v[sbr]\.[{_T}]{{20,}}+"),
    ("whole", "sr", rf"(?<![{_T}].)k_(?:live|test)_[A-Za-z0-9]{{10,}}+"),
    ("whole", "w", rf"(?<![{_T}].)hsec_[A-Za-z0-9+/=]{{20,}}+"),
    ("whole", "n", rf"(?<![{_T}].)pm_[A-Za-z0-9]{{36}}(?![A-Za-z0-9])"),
    ("whole", "p", rf"(?<![{_T}].)ypi-AgE[{_T}]{{50,}}+"),
    ("whole", "S", rf"(?<![{_T}].)G\.[{_T}]{{16,}}+\.[{_T}]{{16,}}+"),
    ("whole", "s", rf"(?<![{_T}].)hp(?:at|ca|pa|ss)_[a-fA-F0-9]{{32}}"),
    ("skey", "s", rf"(?<![{_T}].)k-(?P<cred>[{_T}]{{20,}}+)"),
    # 13-19 digits, bare or grouped; the issuer range and Luhn are checked after.
    (
        "card",
        "23456",
        r"(?<![A-Za-z0-9_.-].)(?:[0-9]{12,18}+"
        r"|[0-9]{3}(?P<sep>[ -])[0-9]{4,6}(?:(?P=sep)[0-9]{3,5}){1,3}+)"
        r"(?![A-Za-z0-9_-]|\.[0-9])",
    ),
]


def _compile_tokens() -> tuple[re.Pattern[str], dict[str, tuple[str, int]]]:
    parts: list[str] = []
    markers: dict[str, tuple[str, int]] = {}
    for kind, firsts, rest in _TOKENS:
        for first in firsts:
            index = len(parts)
            renamed = re.sub(r"\(\?P([<=])(\w+)", rf"(?P\g<1>\g<2>_{index}", rest)
            parts.append(f"{re.escape(first)}{renamed}(?P<k_{index}>)")
            markers[f"k_{index}"] = (kind, index)
    return re.compile("|".join(parts)), markers


_TOKEN_SCAN, _MARKERS = _compile_tokens()


@functools.lru_cache(maxsize=256)
def _stem_scan(declared: frozenset[str]) -> re.Pattern[bytes]:
    """A search for the stems of sensitive names, built-in and declared, in lowered ASCII."""
    stems = set(_NAME_STEMS)
    stems.update(part for name in declared for part in name.split("_") if len(part) >= 2)
    ordered = sorted(stems, key=len, reverse=True)
    return re.compile(b"|".join(re.escape(stem.encode("ascii", "replace")) for stem in ordered))


def _luhn(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        digit = ord(char) - 48
        if index % 2:
            digit = digit * 2 - 9 if digit > 4 else digit * 2
        total += digit
    return total % 10 == 0


def _is_card(digits: str) -> bool:
    return 13 <= len(digits) <= 19 and digits[0] in "23456" and _luhn(digits)


def _is_basic_credential(encoded: str) -> bool:
    try:
        decoded = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        text = decoded.decode("utf-8")
    except (binascii.Error, ValueError):
        return False
    return ":" in text and text.isprintable()


def _looks_like_bearer_token(token: str) -> bool:
    return len(token) >= 24 or any(not char.isalpha() for char in token)


def _quoted(value: str) -> str:
    """``[REDACTED]`` wrapped in the quotes ``value`` had, so JSON-ish text stays well formed."""
    quote = _LEADING_QUOTE.match(value)
    if quote and len(value) >= 2 * len(quote.group(0)) and value.endswith(quote.group(0)):
        return f"{quote.group(0)}{REDACTED}{quote.group(0)}"
    scheme = _SCHEME_PREFIX.match(value)
    return f"{scheme.group(0)}{REDACTED}" if scheme else REDACTED


def redact_text(text: str, *, sensitive_keys: Collection[str] = frozenset()) -> str:
    """Return ``text`` with every secret value in it replaced by ``[REDACTED]``."""
    return _redact_text(text, _declared(sensitive_keys) if sensitive_keys else frozenset())


def _redact_text(text: str, declared: frozenset[str]) -> str:
    return _redact_tokens(_redact_named(text, declared))


# ---------------------------------------------------------------- pass 1: named values


def _redact_named(text: str, declared: frozenset[str]) -> str:
    stems = _stem_scan(declared)
    # One byte per character, so positions in ``lowered`` are positions in ``text``.
    lowered = text.encode("ascii", "replace").lower()
    hit = stems.search(lowered)
    if hit is None:
        return text
    out: list[str] = []
    emitted = 0  # text[:emitted] is in ``out``
    while hit is not None:
        stem_at = hit.start()
        floor = max(emitted, stem_at - 81)
        name_start = stem_at - _name_run(text[floor:stem_at][::-1], 0)
        name_end = stem_at + _name_run(text, stem_at)
        resume = max(name_end, stem_at + 1)
        found = _named_value(text, name_start, name_end, declared)
        if found is not None:
            value_start, value_end, replacement = found
            out.append(text[emitted:value_start])
            out.append(replacement)
            emitted = resume = value_end
        hit = stems.search(lowered, resume)
    out.append(text[emitted:])
    return "".join(out)


def _name_run(text: str, start: int) -> int:
    """How many name characters (at most 81) ``text`` has from ``start`` on."""
    run = _NAME_RUN.match(text, start)
    return run.end() - start if run else 0


def _named_value(
    text: str, start: int, end: int, declared: frozenset[str]
) -> tuple[int, int, str] | None:
    """If ``text[start:end]`` names a secret followed by its value: (value span, replacement)."""
    raw = text[start:end]
    name = raw.lstrip("-.")
    if (
        len(raw) > 80
        or not name
        or not _is_sensitive(name, declared)
        or (end < len(text) and text[end] in _NAME_CHARS)
        or not (name[0].isalpha() or name[0] == "_")
    ):
        return None
    before = text[start - 1] if start else ""
    if before in ("<", ":"):
        tag = _xml_tag(text, start, end)
        if tag is not None:
            after = _AFTER_XML_NAME.match(text, end)
            if after and text.startswith(f"{tag}>", after.end()):
                return (*after.span("value"), REDACTED)
            # Not an element: "<password=hunter2>" is an assignment in angle brackets.
    after = _AFTER_NAME.match(text, end)
    if after is not None and before in ("@", "+", "/") and after.group("sep") != "=":
        # A host ("https://auth.example.com:8443") or a path segment ("/auth:x"); base64
        # ("…+yPw==") never matches "=" followed by a value. "…/password=x" still counts.
        return None
    flag = raw.startswith("-") and (not before or before.isspace() or before in "\"'=")
    if after is None and flag:
        after = _AFTER_FLAG.match(text, end)  # --password hunter2
    if after is None and before in ("'", '"'):
        after = _AFTER_LISTED_NAME.match(text, end)
        if after is not None and not (flag or after.group("label")):
            after = None
    if after is None:
        return None
    value_start, value_end = after.span("value")
    value = after.group("value")
    if (
        "sep" in after.re.groupindex
        and after.group("sep") == ":"
        and "cookie" in name.lower()
        and not value.startswith(("'", '"', "\\"))
    ):
        # A Cookie / Set-Cookie header: every pair on the line is a session.
        line_end = text.find("\n", value_start)
        return value_start, len(text) if line_end < 0 else line_end, REDACTED
    return value_start, value_end, _quoted(value)


def _xml_tag(text: str, start: int, end: int) -> str | None:
    """The full tag name if ``text[start:end]`` is an XML element name (``<ns:password>``)."""
    if text[start - 1] == "<":
        return text[start:end]
    opening = text.rfind("<", max(0, start - 64), start - 1)
    if opening >= 0 and _XML_PREFIX.fullmatch(text, opening + 1, start - 1):
        return text[opening + 1 : end]
    return None


# ---------------------------------------------------------------- pass 2: token shapes


def _redact_tokens(text: str) -> str:
    match = _TOKEN_SCAN.search(text)
    if match is None:
        return text
    out: list[str] = []
    emitted = 0
    while match is not None:
        start = match.start()
        out.append(text[emitted:start])
        piece, emitted = _token_replacement(text, match)
        out.append(piece)
        match = _TOKEN_SCAN.search(text, emitted)
    out.append(text[emitted:])
    return "".join(out)


def _token_replacement(text: str, match: re.Match[str]) -> tuple[str, int]:
    """What replaces ``match`` and where scanning resumes (always after its start)."""
    kind, index = _MARKERS[match.lastgroup or ""]
    start, end = match.span()
    if kind == "whole":
        return REDACTED, end
    if kind == "card":
        digits = match.group(0).replace(" ", "").replace("-", "")
        return (REDACTED if _is_card(digits) else match.group(0)), end
    cred_start, cred_end = match.span(f"cred_{index}")
    credential = match.group(f"cred_{index}")
    if kind in ("url", "mcpt"):  # keep the user name / the token's (public) lookup
        return f"{text[start:cred_start]}{REDACTED}{text[cred_end:end]}", end
    if kind == "skey":
        return (REDACTED if any(char.isdigit() for char in credential) else match.group(0)), end
    secret = (
        _looks_like_bearer_token(credential)
        if kind == "bearer"
        else _is_basic_credential(credential)
    )
    if secret:
        return f"{text[start:cred_start]}{REDACTED}", end
    return text[start:cred_start], cred_start  # prose ("the bearer of…"): keep it, scan on


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
