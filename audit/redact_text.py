"""Secrets in text (audit.redact's rules, in its docstring): :func:`redact_text`, a keyed pass
(values next to a sensitive name) then a token pass (secrets by their shape)."""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Collection

from audit.redact_keys import REDACTED, _declared, _is_sensitive

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
