"""MRTR ``requestState``: sealed (Fernet: AES-CBC + HMAC-SHA256, an AEAD construction) so the
client can neither read nor alter it. It binds principal, tool, argument digest, an expiry and a
nonce, and carries the questions asked and every answer so far."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from cryptography.fernet import Fernet, InvalidToken

from mcptasks.protocol.errors import invalid_params

STATE_TTL_S = 15 * 60


def _fernet(key: str) -> Fernet:
    """The sealing key derived from the deployment's secret (``settings.REQUEST_STATE_KEY``,
    handed in by the caller: this module reads no settings)."""
    digest = hashlib.sha256(b"mcptasks-request-state:" + key.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


@dataclass
class RequestState:
    principal_id: int
    tenant_id: int
    tool: str
    argument_digest: str
    nonce: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    expires_at: float = field(default_factory=lambda: time.time() + STATE_TTL_S)
    asked: dict[str, dict[str, Any]] = field(default_factory=dict)
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)

    def seal(self, key: str) -> str:
        payload = {
            "v": 1,
            "p": self.principal_id,
            "tn": self.tenant_id,
            "t": self.tool,
            "d": self.argument_digest,
            "n": self.nonce,
            "e": self.expires_at,
            "q": self.asked,
            "a": self.answers,
        }
        return _fernet(key).encrypt(json.dumps(payload, separators=(",", ":")).encode()).decode()

    @classmethod
    def open(
        cls,
        token: Any,
        *,
        key: str,
        principal_id: int,
        tenant_id: int,
        tool: str,
        argument_digest: str,
    ) -> RequestState:
        """Verify and decrypt; raise -32602 naming what is wrong. Nothing runs on failure."""
        if not isinstance(token, str) or not token or len(token) > 1_000_000:
            raise invalid_params("requestState must be the string this server returned")
        try:
            # Fernet's base64 decoding ignores anything after the padding, so a state with a
            # suffix appended would verify: accept only the exact canonical encoding we issued.
            if base64.urlsafe_b64encode(base64.urlsafe_b64decode(token)).decode() != token:
                raise InvalidToken
            payload = json.loads(_fernet(key).decrypt(token.encode()))
        except (InvalidToken, ValueError):
            raise invalid_params(
                "requestState failed verification (tampered or not ours)"
            ) from None
        if payload.get("p") != principal_id or payload.get("tn") != tenant_id:
            raise invalid_params("requestState belongs to another principal")
        if payload.get("t") != tool or payload.get("d") != argument_digest:
            raise invalid_params("requestState was issued for a different tool or arguments")
        if payload.get("e", 0) < time.time():
            raise invalid_params("requestState has expired; call the tool again without it")
        return cls(
            principal_id=principal_id,
            tenant_id=tenant_id,
            tool=tool,
            argument_digest=argument_digest,
            nonce=payload["n"],
            expires_at=time.time() + STATE_TTL_S,
            asked=payload.get("q") or {},
            answers=payload.get("a") or {},
        )
