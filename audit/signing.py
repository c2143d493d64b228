"""Ed25519 signatures for export manifests.

The private key is derived from ``settings.AUDIT_SIGNING_KEY`` (HKDF-SHA-256, fixed info string)
so every process that shares the setting signs with the same key and nothing else is stored. The
key id is the SHA-256 of the raw public key: rotating the setting yields a new key id, and
manifests signed before stay verifiable with the public key they carry once that key is trusted
(``settings.MCPTASKS_AUDIT_TRUSTED_PUBLIC_KEYS`` or ``verify_export --public-key``).

Ed25519 rather than HMAC-SHA256: a third party can verify a manifest with the public key alone,
without being able to forge one.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Any

import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

ALGORITHM = "Ed25519"
_HKDF_INFO = b"mcptasks audit export manifest signing key v1"


@dataclass(frozen=True)
class SigningKey:
    private_key: Ed25519PrivateKey
    public_key_b64: str
    key_id: str


def key_id_of(public_key_raw: bytes) -> str:
    return hashlib.sha256(public_key_raw).hexdigest()


def derive_key(secret: str) -> SigningKey:
    """The Ed25519 key a secret derives (deterministic)."""
    seed = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_HKDF_INFO).derive(
        secret.encode()
    )
    private_key = Ed25519PrivateKey.from_private_bytes(seed)
    raw = private_key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    return SigningKey(
        private_key=private_key,
        public_key_b64=base64.b64encode(raw).decode(),
        key_id=key_id_of(raw),
    )


def current_key() -> SigningKey:
    return derive_key(settings.AUDIT_SIGNING_KEY)


def trusted_public_keys() -> dict[str, str]:
    """Key id → base64 public key of every key a manifest may be signed with: the current key
    and those listed in ``MCPTASKS_AUDIT_TRUSTED_PUBLIC_KEYS`` (retired keys)."""
    key = current_key()
    trusted = {key.key_id: key.public_key_b64}
    for public_key_b64 in settings.MCPTASKS_AUDIT_TRUSTED_PUBLIC_KEYS:
        trusted[key_id_of(base64.b64decode(public_key_b64))] = public_key_b64
    return trusted


def signed_bytes(document: dict[str, Any]) -> bytes:
    """What a signature covers: RFC 8785 JSON of the document without its ``signature``."""
    return rfc8785.dumps({k: v for k, v in document.items() if k != "signature"})


def sign(document: dict[str, Any], key: SigningKey | None = None) -> dict[str, Any]:
    """Return ``document`` with ``signing`` (algorithm, key id, public key) and ``signature``."""
    key = key or current_key()
    signed = {
        **document,
        "signing": {"algorithm": ALGORITHM, "key_id": key.key_id, "public_key": key.public_key_b64},
    }
    signature = key.private_key.sign(signed_bytes(signed))
    return {**signed, "signature": base64.b64encode(signature).decode()}


class SignatureError(Exception):
    """The signature is missing, malformed, made by an untrusted key, or does not match."""


def check_signature(document: dict[str, Any], trusted: dict[str, str]) -> str:
    """Check a signed document against trusted keys (key id → base64 public key).

    Returns the key id; raises :class:`SignatureError`.
    """
    signing = document.get("signing") or {}
    if signing.get("algorithm") != ALGORITHM:
        raise SignatureError(f"unsupported signing algorithm {signing.get('algorithm')!r}")
    key_id = signing.get("key_id", "")
    if key_id not in trusted:
        raise SignatureError(f"key id {key_id[:16]}… is not a trusted signing key")
    if signing.get("public_key") != trusted[key_id]:
        raise SignatureError("the manifest's public key does not match its key id")
    try:
        public_key = Ed25519PublicKey.from_public_bytes(base64.b64decode(trusted[key_id]))
        public_key.verify(
            base64.b64decode(document.get("signature", ""), validate=True), signed_bytes(document)
        )
    except (InvalidSignature, ValueError) as exc:
        raise SignatureError("the signature does not match the manifest") from exc
    return key_id
