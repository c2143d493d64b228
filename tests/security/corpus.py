"""The seeded secret corpus: one of each kind of secret the redactor claims (audit/redact.py),
placed in a payload (nested in dicts and lists) and in prose, plus the needles to search for."""

from __future__ import annotations

import random
import string
from dataclasses import dataclass, field
from typing import Any

from tests.audit import test_redaction as shapes

ALNUM = string.ascii_letters + string.digits


@dataclass
class Corpus:
    payload: dict[str, Any]
    prose: str
    answer_note: str
    deploy_pin: str
    # name -> the strings that must never appear in a sink (a secret and pieces of it)
    needles: dict[str, list[str]] = field(default_factory=dict)

    def hits(self, text: str) -> list[str]:
        """The corpus secrets found in ``text``, by name."""
        return sorted(
            name for name, needles in self.needles.items() if any(n in text for n in needles)
        )


def _pieces(secret: str) -> list[str]:
    """The secret and, for long ones, three 12-character pieces (a half-redacted secret)."""
    return shapes.fragments(secret)


def build(seed: int = 19) -> Corpus:
    """The same corpus on every run (the shapes' generator is reseeded, then restored)."""
    state = shapes.RNG.getstate()
    shapes.RNG.seed(seed)
    try:
        return _build(random.Random(seed))
    finally:
        shapes.RNG.setstate(state)


def _build(rng: random.Random) -> Corpus:

    def rand(length: int) -> str:
        return "".join(rng.choice(ALNUM) for _ in range(length))

    akia = "AKIA" + "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(16))
    aws_secret = shapes.aws_secret()
    aws_secret_prose = shapes.aws_secret()
    pem = shapes.make_pem("RSA")
    jwt = shapes.make_jwt(scope="deploy")
    jwt_prose = shapes.make_jwt(scope="admin")
    bearer = rand(40)
    bearer_prose = rand(36)
    ghp = "ghp_" + rand(36)
    stripe = "sk_live_" + rand(24)
    mcpt = f"mcpt_{''.join(rng.choice('0123456789abcdef') for _ in range(12))}_{rand(43)}"
    db_password = shapes.password()
    angle_password = shapes.password()
    nested_password = shapes.password()
    answer_password = shapes.password()
    card = shapes.luhn_number("4539", 16)
    card_prose = shapes.luhn_number("51", 16)
    pin = str(rng.randint(10**7, 10**8 - 1))
    card_grouped = shapes.grouped(card, (4, 4, 4, 4), " ")
    card_prose_grouped = shapes.grouped(card_prose, (4, 4, 4, 4), "-")

    payload = {
        "service": f"billing-{akia}",
        "aws": {"region": "eu-west-1", "aws_access_key_id": akia, "secret_access_key": aws_secret},
        "tls": {"private_key": pem},
        "sessions": [jwt, {"headers": [f"Authorization: Bearer {bearer}"]}],
        "seen": [[ghp, stripe], {"via": mcpt}],
        "database_url": f"postgres://app:{db_password}@db.internal:5432/orders",
        "steps": [[["run migrations", f"config <password={nested_password}>"]]],
        "payment": {"card": card_grouped, "pan": int(card)},
    }
    prose = (
        f"deploy billing with aws_secret_access_key={aws_secret_prose} and <password="
        f"{angle_password}>, JWT {jwt_prose}, Authorization: Bearer {bearer_prose}, "
        f"card {card_prose_grouped} on file"
    )
    needles = {
        "aws_access_key_id": [akia],
        "aws_secret_access_key": _pieces(aws_secret),
        "aws_secret_in_prose": _pieces(aws_secret_prose),
        "pem_private_key": pem.splitlines()[2:6],
        "jwt": [jwt.split(".")[2][:40], jwt.split(".")[1]],
        "jwt_in_prose": [jwt_prose.split(".")[2][:40], jwt_prose.split(".")[1]],
        "bearer_token": _pieces(bearer),
        "bearer_in_prose": _pieces(bearer_prose),
        "github_token": _pieces(ghp),
        "stripe_key": _pieces(stripe),
        "mcpt_token_secret": _pieces(mcpt.split("_", 2)[2]),
        "database_password": [db_password],
        "angle_bracket_password": [angle_password],
        "nested_password": [nested_password],
        "answered_password": [answer_password],
        "card_number": [card, card_grouped],
        "card_in_prose": [card_prose, card_prose_grouped],
        "declared_sensitive_pin": [pin],
    }
    return Corpus(
        payload=payload,
        prose=prose,
        answer_note=f"ok, use password: {answer_password} and card {card_grouped}",
        deploy_pin=pin,
        needles=needles,
    )
