"""Destination secrets at rest: Fernet (AES-CBC + HMAC-SHA256) with a key derived from
``MCPTASKS_DESTINATION_SECRET_KEY`` (default ``SECRET_KEY``), as MRTR's requestState is sealed.

A secret is written, never read back by anyone but the sink that sends with it: no API,
page, log line or audit event carries it (audit rows say "secret changed")."""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


class SecretUnreadable(Exception):
    """The stored secret cannot be decrypted (the key changed): the delivery fails, retryable
    once the key is restored, and the dashboard says the secret must be set again."""


def _fernet() -> Fernet:
    key = hashlib.sha256(
        b"mcptasks-destination-secret:" + settings.MCPTASKS_DESTINATION_SECRET_KEY.encode()
    ).digest()
    return Fernet(base64.urlsafe_b64encode(key))


def encrypt(secret: str) -> str:
    """The stored form of ``secret`` ("" stays "": no secret)."""
    if not secret:
        return ""
    return _fernet().encrypt(secret.encode()).decode()


def decrypt(stored: str) -> str | None:
    """The secret of a stored form (None when there is none); raise :class:`SecretUnreadable`."""
    if not stored:
        return None
    try:
        return _fernet().decrypt(stored.encode()).decode()
    except (InvalidToken, ValueError):
        raise SecretUnreadable("the destination's secret cannot be decrypted") from None
