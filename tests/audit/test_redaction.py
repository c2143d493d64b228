"""The audit redactor (DESIGN §7): a corpus of realistic secrets never survives redaction, in any
place a payload can hold them, and a corpus of harmless look-alikes survives unchanged."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import random
import string
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
import rfc8785
from django.db import connection
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.chain import event_body, link_hash
from audit.models import AuditEvent
from audit.record import Actor, record
from audit.redact import (
    REDACTED,
    is_sensitive_key,
    redact,
    redact_mapping,
    redact_text,
)

# ---------------------------------------------------------------- realistic fake secrets

RNG = random.Random(20260728)  # fixed: the corpus is the same on every run
ALNUM = string.ascii_letters + string.digits
URLSAFE = ALNUM + "-_"
HEX = "0123456789abcdef"
UPPER = string.ascii_uppercase + string.digits


def rand(alphabet: str, length: int) -> str:
    return "".join(RNG.choice(alphabet) for _ in range(length))


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def make_jwt(**claims: Any) -> str:
    """A real header.payload.signature JWT (RS256-sized signature)."""
    header = {"alg": "RS256", "typ": "JWT", "kid": rand(HEX, 16)}
    payload = {
        "sub": f"user-{RNG.randint(1000, 9999)}",
        "iss": "https://login.example.com",
        "aud": "mcp-tasks",
        "iat": 1785228000,
        "exp": 1785231600,
        **claims,
    }
    signature = RNG.randbytes(256)
    return ".".join(
        [
            b64url(json.dumps(header).encode()),
            b64url(json.dumps(payload).encode()),
            b64url(signature),
        ]
    )


def make_pem(kind: str = "RSA") -> str:
    body = base64.b64encode(RNG.randbytes(1190)).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    label = f"{kind} PRIVATE KEY" if kind else "PRIVATE KEY"
    return f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----\n"


def luhn_number(prefix: str, length: int, *, valid: bool = True) -> str:
    """Digits starting with ``prefix``, ``length`` long, passing (or failing) the Luhn check."""
    body = prefix + "".join(RNG.choice(string.digits) for _ in range(length - len(prefix) - 1))
    total = 0
    for index, char in enumerate(reversed(body)):
        digit = int(char)
        if index % 2 == 0:
            digit = digit * 2 - 9 if digit > 4 else digit * 2
        total += digit
    check = (10 - total % 10) % 10
    return body + str(check if valid else (check + 1) % 10)


def password() -> str:
    return rand(ALNUM, 10) + RNG.choice("!#%^*") + rand(ALNUM, 5)


def aws_secret() -> str:
    return rand(ALNUM + "/+", 40)


def grouped(digits: str, sizes: tuple[int, ...], sep: str) -> str:
    out, at = [], 0
    for size in sizes:
        out.append(digits[at : at + size])
        at += size
    return sep.join(out)


@dataclass
class Case:
    """A payload holding secrets; ``kept`` are strings around them that must survive."""

    name: str
    payload: Any
    secrets: list[str]
    kept: list[str] = field(default_factory=list)
    sensitive_keys: frozenset[str] = frozenset()


def nest(value: Any, *path: str) -> Any:
    for key in reversed(path):
        value = {key: value}
    return value


def build_corpus() -> list[Case]:
    cases: list[Case] = []

    def add(
        name: str,
        payload: Any,
        secrets: list[str],
        kept: list[str] | None = None,
        sensitive_keys: frozenset[str] = frozenset(),
    ) -> None:
        cases.append(Case(name, payload, secrets, kept or [], sensitive_keys))

    pw = password()
    add(
        "password_tool_argument",
        {"host": "db.internal", "user": "app", "db_password": pw},
        [pw],
        ["db.internal"],
    )
    pw = password()
    add(
        "camelcase_password_5_deep",
        nest({"dbPassword": pw, "dbName": "orders"}, "deploy", "targets", "prod", "database"),
        [pw],
        ["orders"],
    )
    key = rand(HEX, 32)
    add(
        "x_api_key_header",
        {
            "request": {
                "method": "POST",
                "url": "https://api.example.com/v1",
                "headers": {"X-Api-Key": key, "Accept": "json"},
            }
        },
        [key],
        ["https://api.example.com/v1"],
    )
    secret = aws_secret()
    add(
        "aws_secret_access_key_argument",
        {
            "aws": {
                "region": "eu-west-1",
                "aws_access_key_id": "AKIA" + rand(UPPER, 16),
                "aws_secret_access_key": secret,
            }
        },
        [secret],
        ["eu-west-1"],
    )
    akia = "AKIA" + rand(UPPER, 16)
    add(
        "aws_key_id_in_error_message",
        {
            "error": f"InvalidClientTokenId: The security token included in the request is "
            f"invalid (access key {akia}, region us-east-1)"
        },
        [akia],
        ["InvalidClientTokenId", "us-east-1"],
    )
    asia = "ASIA" + rand(UPPER, 16)
    add("aws_session_key_id_in_list", {"credentials_seen": ["anonymous", asia]}, [asia])
    secret = aws_secret()
    add(
        "aws_secret_in_credentials_file_text",
        {
            "file": "~/.aws/credentials",
            "content": f"[default]\naws_access_key_id = "
            f"AKIA{rand(UPPER, 16)}\n"
            f"aws_secret_access_key = {secret}\n"
            f"region = eu-central-1\n",
        },
        [secret],
        ["region = eu-central-1"],
    )
    opaque = rand(URLSAFE, 40)
    add(
        "bearer_token_in_log_lines",
        {
            "log": [
                "GET /v1/jobs 200",
                f"sent header Authorization: Bearer {opaque}",
                "retrying in 2s",
            ]
        },
        [opaque],
        ["GET /v1/jobs 200", "retrying in 2s"],
    )
    jwt = make_jwt(scope="tasks:read tasks:write")
    add(
        "jwt_in_free_text",
        {"status": f"token eyJ expired: {jwt} (exp 1785231600)"},
        [jwt],
        ["(exp 1785231600)"],
    )
    jwt = make_jwt(email="ann@example.com")
    add(
        "jwt_in_query_string",
        {"callback": f"https://app.example.com/cb?state=xyz&access_token={jwt}&lang=en"},
        [jwt],
        ["state=xyz", "lang=en"],
    )
    jwt = make_jwt(nonce=rand(HEX, 8))
    add(
        "oauth_token_response",
        {
            "response": {
                "access_token": jwt,
                "refresh_token": rand(URLSAFE, 64),
                "id_token": make_jwt(),
                "token_type": "Bearer",
                "expires_in": 3600,
            }
        },
        [jwt],
        ['"token_type": "Bearer"', '"expires_in": 3600'],
    )
    pem = make_pem("RSA")
    add(
        "pem_key_under_harmless_key",
        {"upload": {"filename": "id_rsa", "content": pem}},
        [pem, pem.splitlines()[5]],
        ["id_rsa"],
    )
    pem = make_pem("OPENSSH")
    add(
        "pem_key_json_escaped_in_error",
        {"error": "could not parse " + json.dumps({"key_material": pem})[1:-1]},
        [pem.splitlines()[3], pem.splitlines()[10]],
        ["could not parse"],
    )
    pem = make_pem("")
    add(
        "gcp_service_account",
        {
            "service_account": {
                "type": "service_account",
                "project_id": "acme-prod",
                "private_key_id": rand(HEX, 40),
                "private_key": pem,
                "client_email": "deployer@acme-prod.iam.gserviceaccount.com",
            }
        },
        [pem.splitlines()[2]],
        ["acme-prod", "deployer@acme-prod.iam.gserviceaccount.com"],
    )
    gkey = "AIza" + rand(URLSAFE, 35)
    add(
        "google_api_key_in_url",
        {"url": f"https://maps.googleapis.com/maps/api/geocode/json?address=Berlin&key={gkey}"},
        [gkey],
        ["address=Berlin"],
    )
    ghp = "ghp_" + rand(ALNUM, 36)
    add(
        "github_token_as_git_remote_user",
        {"remote": f"https://{ghp}@github.com/acme/deploy.git"},
        [ghp],
        ["github.com/acme"],
    )
    gho = "gho_" + rand(ALNUM, 36)
    add("github_oauth_token_in_list", {"tried": [gho, "anonymous"]}, [gho], ["anonymous"])
    ghs = "ghs_" + rand(ALNUM, 36)
    add(
        "github_app_token_as_url_password",
        {"clone": f"git clone https://x-access-token:{ghs}@github.com/acme/app.git"},
        [ghs],
        ["x-access-token:", "github.com/acme/app.git"],
    )
    pat = "github_pat_" + rand(ALNUM, 22) + "_" + rand(ALNUM, 59)
    add("github_pat_in_env_list", {"env": ["CI=true", f"GH_PAT={pat}"]}, [pat], ["CI=true"])
    xoxb = f"xoxb-{RNG.randint(10**10, 10**11)}-{RNG.randint(10**12, 10**13)}-{rand(ALNUM, 24)}"
    add(
        "slack_bot_token_under_harmless_key",
        {"channel": "#deploys", "via": xoxb},
        [xoxb],
        ["#deploys"],
    )
    xoxp = f"xoxp-{RNG.randint(10**10, 10**11)}-{RNG.randint(10**10, 10**11)}-{rand(HEX, 32)}"
    add(
        "slack_user_token_in_prose",
        {"note": f"used {xoxp} to post the message"},
        [xoxp],
        ["to post the message"],
    )
    xapp = f"xapp-1-A0{rand(UPPER, 9)}-{RNG.randint(10**12, 10**13)}-{rand(HEX, 64)}"
    add("slack_app_token", {"tokens": None, "socket_mode": {"app": [xapp]}}, [xapp])
    stripe = "sk_live_" + rand(ALNUM, 24)
    add("stripe_live_key", {"billing": {"mode": "live", "k": stripe}}, [stripe], ["live"])
    card = luhn_number("4539", 16)
    spaced = grouped(card, (4, 4, 4, 4), " ")
    add(
        "card_with_spaces_in_ticket",
        {"ticket": f"Customer says card {spaced} was declined twice; phone 415-555-0132"},
        [spaced, spaced[5:14]],
        ["declined twice", "415-555-0132"],
    )
    amex = luhn_number("37", 15)
    dashed = grouped(amex, (4, 6, 5), "-")
    add("amex_with_dashes", {"payment": {"method": "amex", "number_entered": dashed}}, [dashed])
    visa, mastercard = luhn_number("4", 16), luhn_number("51", 16)
    add(
        "card_as_bare_string_and_int",
        {"pan_text": visa, "pan_int": int(mastercard)},
        [visa, mastercard],
    )
    pw = "S3cr3t!"
    add(
        "postgres_url_in_error_message",
        {"error": f"connection failed for postgres://app:{pw}@db:5432/x"},
        [pw],
        ["connection failed for postgres://app:", "@db:5432/x"],
    )
    pw = password()
    add(
        "mysql_dsn",
        {"database_url": f"mysql://root:{pw}@10.0.0.5:3306/prod"},
        [pw],
        ["mysql://root:", "@10.0.0.5:3306/prod"],
    )
    pw = rand(ALNUM, 24)
    add(
        "redis_url_without_user",
        {"cache": [{"url": f"redis://:{pw}@cache:6379/0"}]},
        [pw],
        ["@cache:6379/0"],
    )
    user_pass = f"deploy:{password()}"
    basic = base64.b64encode(user_pass.encode()).decode()
    add(
        "basic_auth_in_header_pairs",
        {
            "headers": [
                ["Accept", "application/json"],
                ["X-Forwarded-For", "10.1.2.3"],
                ["Proxy", f"Basic {basic}"],
            ]
        },
        [basic],
        ["10.1.2.3"],
    )
    mcpt = f"mcpt_{rand(HEX, 12)}_{rand(URLSAFE, 43)}"
    add(
        "project_api_token_in_prose",
        {"message": f"retry with {mcpt} if the first call fails"},
        [mcpt.split("_", 2)[2]],
        [mcpt.split("_", 2)[1], "if the first call fails"],
    )
    sid, csrf = rand(HEX, 32), rand(ALNUM, 32)
    add(
        "cookie_header_text",
        {
            "raw_request": f"GET / HTTP/1.1\nHost: app\nCookie: sessionid={sid}; csrftoken={csrf}; "
            f"theme=dark\nAccept: */*"
        },
        [sid, csrf],
        ["Host: app", "Accept: */*"],
    )
    sid = rand(URLSAFE, 32)
    add("session_id_key", {"client": {"sessionId": sid, "ip": "10.0.0.9"}}, [sid], ["10.0.0.9"])
    secret = rand(URLSAFE, 40)
    add(
        "client_secret_in_list_of_dicts",
        {
            "providers": [
                {"name": "github", "client_id": "Iv1.8a61f9b3a7aba766", "client_secret": secret}
            ]
        },
        [secret],
        ["Iv1.8a61f9b3a7aba766"],
    )
    pw = password()
    add(
        "k8s_env_name_value",
        {
            "spec": {
                "containers": [
                    {
                        "name": "api",
                        "env": [
                            {"name": "DB_HOST", "value": "postgres"},
                            {"name": "DB_PASSWORD", "value": pw},
                        ],
                    }
                ]
            }
        },
        [pw],
        ['"value": "postgres"'],
    )
    pw = password()
    add(
        "cli_args_list",
        {"argv": ["psql", "-h", "db", "--password", pw, "-c", "select 1"]},
        [pw],
        ["select 1"],
    )
    pin = str(RNG.randint(100000, 999999))
    add(
        "tool_declared_sensitive_argument",
        {"environment": "prod", "deploy_pin": pin},
        [pin],
        ["prod"],
        frozenset({"deploy_pin"}),
    )
    key = rand(ALNUM, 32)
    add(
        "python_repr_in_exception",
        {
            "traceback": f"ValueError: bad config {{'endpoint': 'https://x.example', "
            f"'api_key': '{key}', 'retries': 3}}"
        },
        [key],
        ["'retries': 3", "https://x.example"],
    )
    pw = password()
    add(
        "json_inside_a_string",
        {"body": json.dumps({"username": "ann", "password": pw})},
        [pw],
        ['"username": "ann"'],
    )
    pw = password()
    add(
        "soap_xml_password",
        {
            "envelope": f"<wsse:UsernameToken><wsse:Username>svc</wsse:Username>"
            f'<wsse:Password Type="PasswordText">{pw}</wsse:Password>'
            f"</wsse:UsernameToken>"
        },
        [pw],
        ["<wsse:Username>svc</wsse:Username>"],
    )
    openai = "sk-proj-" + rand(URLSAFE, 48)
    add(
        "openai_key_in_prose",
        {"hint": f"set OPENAI_API_KEY to {openai} before running"},
        [openai],
        ["before running"],
    )
    npm = "npm_" + rand(ALNUM, 36)
    add(
        "npmrc_auth_token",
        {"npmrc": f"//registry.npmjs.org/:_authToken={npm}\n"},
        [npm],
        ["//registry.npmjs.org/"],
    )
    vault = "hvs." + rand(URLSAFE, 90)
    add("vault_token", {"vault": {"addr": "https://vault:8200", "t": vault}}, [vault])
    sendgrid = f"SG.{rand(URLSAFE, 22)}.{rand(URLSAFE, 43)}"
    add(
        "sendgrid_key",
        {"mailer": [{"smtp": "smtp.sendgrid.net", "k": sendgrid}]},
        [sendgrid],
        ["smtp.sendgrid.net"],
    )
    signature, security = rand(HEX, 64), rand(URLSAFE, 300)
    add(
        "presigned_s3_url",
        {
            "download": f"https://bucket.s3.amazonaws.com/report.csv?X-Amz-Algorithm=AWS4-HMAC-SHA256"
            f"&X-Amz-Credential=AKIA{rand(UPPER, 16)}%2F20260728&X-Amz-Security-Token="
            f"{security}&X-Amz-Signature={signature}"
        },
        [signature, security],
        ["report.csv", "X-Amz-Algorithm=AWS4-HMAC-SHA256"],
    )
    secret = rand(ALNUM, 24)
    add(
        "secret_inside_list_inside_dict_5_deep",
        nest([{"kind": "webhook", "config": {"signing_secret": secret}}], "a", "b", "c", "d"),
        [secret],
        ["webhook"],
    )
    pw = password()
    add(
        "password_assignment_in_angle_brackets",
        {"error": f"login refused for <user=ann> <password={pw}> at 10:02"},
        [pw],
        ["<user=ann>", "at 10:02"],
    )
    secret = aws_secret()
    add(
        "aws_secret_assignment_in_prose_after_a_path",
        {"note": f"loaded profile/aws_secret_access_key={secret} from the vault"},
        [secret],
        ["from the vault"],
    )
    pw = password()
    add(
        "password_value_in_angle_brackets",
        {"hint": f"use password=<{pw}> for the staging box"},
        [pw],
        ["for the staging box"],
    )
    return cases


CORPUS = build_corpus()


def fragments(secret: str) -> list[str]:
    """The secret, and pieces of it, so that a half-redacted secret is caught too."""
    pieces = [secret]
    if len(secret) >= 24:
        middle = len(secret) // 2
        pieces += [secret[:12], secret[middle - 6 : middle + 6], secret[-12:]]
    return pieces


def dumped(value: Any) -> str:
    """The redacted value as the audit log stores it (and with JSON string escapes undone)."""
    text = json.dumps(value, ensure_ascii=False)
    return text + "\n" + text.replace("\\n", "\n").replace('\\"', '"')


def assert_no_secret(text: str, secrets: list[str]) -> None:
    for secret in secrets:
        for piece in fragments(secret):
            assert piece not in text, f"{piece!r} (of {secret[:20]!r}…) survived"


# ---------------------------------------------------------------- the secret corpus


def test_corpus_is_large_and_its_secrets_are_real() -> None:
    secrets = [secret for case in CORPUS for secret in case.secrets]
    assert len(CORPUS) >= 30 and len(secrets) >= 30
    # The fake secrets are where the test thinks they are, before redaction.
    for case in CORPUS:
        raw = dumped(case.payload)
        for secret in case.secrets:
            assert secret in raw or secret in str(case.payload), case.name


@pytest.mark.parametrize("case", CORPUS, ids=[case.name for case in CORPUS])
def test_secret_is_redacted_and_its_context_kept(case: Case) -> None:
    result = redact(case.payload, sensitive_keys=case.sensitive_keys)

    assert not (isinstance(result, dict) and result.get("truncated")), "stubbed, not redacted"
    text = dumped(result)
    assert_no_secret(text, case.secrets)
    assert REDACTED in text
    for kept in case.kept:
        assert kept in text, f"{kept!r} was lost"
    rfc8785.dumps(result)  # the audit chain can hash it


@pytest.mark.parametrize("case", CORPUS, ids=[case.name for case in CORPUS])
def test_secret_is_redacted_when_its_payload_is_serialized_into_an_error_message(
    case: Case,
) -> None:
    for form in (
        json.dumps(case.payload),
        repr(case.payload),
        json.dumps(json.dumps(case.payload)),
    ):  # JSON, a Python repr, JSON in JSON
        message = f"ToolError: call failed with arguments {form} (attempt 2)"

        text = redact_text(message, sensitive_keys=case.sensitive_keys)

        assert_no_secret(text + "\n" + text.replace("\\n", "\n"), case.secrets)
        assert text.startswith("ToolError: call failed with arguments ")


def test_all_secrets_together_in_one_deep_payload_are_redacted() -> None:
    payload: dict[str, Any] = {"tool": "deploy", "arguments": {}}
    for index, case in enumerate(CORPUS):
        payload["arguments"][f"step_{index}"] = nest([case.payload], "run", "inputs", "raw")
    declared = frozenset().union(*(case.sensitive_keys for case in CORPUS))

    result = redact(payload, sensitive_keys=declared, max_bytes=1_000_000)

    assert "truncated" not in result
    assert_no_secret(dumped(result), [s for case in CORPUS for s in case.secrets])


def test_sensitive_key_replaces_whole_value_of_any_type() -> None:
    payload = {
        "credentials": {"user": "ann", "pass": "x"},
        "api_keys": ["k1", "k2"],
        "pin_code": 4321,
        "Authorization": "Bearer abc",
        "password": None,
        "secret_enabled": True,
    }

    result = redact(payload, sensitive_keys={"pin_code"})

    assert result == {
        "credentials": REDACTED,
        "api_keys": REDACTED,
        "pin_code": REDACTED,
        "Authorization": REDACTED,
        "password": None,
        "secret_enabled": True,
    }


def test_secret_inside_a_dict_key_is_redacted() -> None:
    token = "ghp_" + rand(ALNUM, 36)

    result = redact({"seen": {token: 3, "other": 1}})

    assert token not in json.dumps(result)
    assert result["seen"]["other"] == 1


def test_redact_text_and_mapping_for_log_events() -> None:
    pw = password()
    event = {
        "event": f"login failed password={pw}",
        "user": "ann",
        "token": "abc",
        "level": "warning",
    }

    assert pw not in redact_text(event["event"])
    assert redact_mapping(event) == {
        "event": "login failed password=[REDACTED]",
        "user": "ann",
        "token": REDACTED,
        "level": "warning",
    }


# ---------------------------------------------------------------- look-alikes survive


def look_alikes() -> dict[str, Any]:
    digest = hashlib.sha256(b"release-2026.07.28.tar.gz").hexdigest()
    phone = luhn_number("415", 10, valid=False)
    return {
        "uuid": str(uuid.UUID(int=RNG.getrandbits(128), version=4)),
        "sha256": digest,
        "git_commit": hashlib.sha1(b"commit").hexdigest(),
        "ci_log": f"checked out {hashlib.sha1(b'head').hexdigest()[:12]} at 2026-07-28T09:15:27Z",
        "reset_notice": "Reset your password via the link we emailed you.",
        "prose": "Your session token expires in 5 minutes; request a new token to continue. "
        "The secret to a good deploy is a small diff.",
        "rfc": "The Bearer scheme (RFC 6750) and Basic authentication are both supported.",
        "timestamp": "2026-07-28T09:15:27.123456+00:00",
        "date": dt.date(2026, 7, 28).isoformat(),
        "phone": phone,
        "phone_pretty": "+1 (415) 555-0132",
        "luhn_failing_16": luhn_number("4111", 16, valid=False),
        "epoch_ms": "1785228927123",
        "epoch_ms_int": 1785228927123,
        "order": "ORD-2026-000123",
        "url": "https://docs.example.com/guide/tasks?page=2&lang=en#cancel",
        "ssh_remote": "ssh://git@github.com/acme/deploy.git",
        "host_url": "https://auth.example.com:8443/login",
        "mac": "00:1A:2B:3C:4D:5E",
        "ratio": "16:9 at 1920x1080",
        "sampling": {
            "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
            "maxTokens": 1024,
            "temperature": 0.2,
            "stopSequences": ["\n\n"],
        },
        "max_tokens": 100,
        "usage": {"input_tokens": 812, "output_tokens": 64, "cache_read_input_tokens": 0},
        "_meta": {"progressToken": "progress-7f3a"},
        "tokenizer": "cl100k_base",
        "token_count": 12,
        "nextPageToken": "CAoQAA",
        "token_id": 42,
        "password_min_length": 12,
        "secretName": "db-credentials",
        "secretKeyRef": {"name": "db-credentials", "key": "password"},
        "client_secret_expires_at": 0,
        "idempotency_key": "deploy-42-step-3",
        "public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG4rT3vTt99Ox5kndS4HmgTrKBT8SKzhK4rhGkEV"
        "GlCI ops@example.com",
        "input_request": {"key": "approve", "via": "mcp", "action": "accept"},
        "thumbnail": "data:image/png;base64," + base64.b64encode(RNG.randbytes(600)).decode(),
        "python_repr": "{'user': 'bob', 'max_tokens': 5, 'retries': 3}",
    }


def test_look_alikes_survive_unchanged() -> None:
    payload = look_alikes()

    assert redact(payload) == payload


@pytest.mark.parametrize("name", sorted(look_alikes()))
def test_each_look_alike_survives_as_text(name: str) -> None:
    value = look_alikes()[name]
    if isinstance(value, str):
        assert redact_text(value) == value


@pytest.mark.parametrize(
    ("key", "sensitive"),
    [
        ("password", True),
        ("dbPassword", True),
        ("X-Api-Key", True),
        ("apikey", True),
        ("aws_secret_access_key", True),
        ("Authorization", True),
        ("Set-Cookie", True),
        ("private_key", True),
        ("client_secret", True),
        ("access_key", True),
        ("credentials", True),
        ("PHPSESSID", True),
        ("sessionId", True),
        ("refresh_token", True),
        ("csrftoken", True),
        ("token", True),
        ("cvv", True),
        ("basic_auth", True),
        ("max_tokens", False),
        ("maxTokens", False),
        ("token_count", False),
        ("tokenizer", False),
        ("input_tokens", False),
        ("progressToken", False),
        ("token_id", False),
        ("password_min_length", False),
        ("secretName", False),
        ("public_key", False),
        ("idempotency_key", False),
        ("key", False),
        ("session", False),
        ("secretary", False),
    ],
)
def test_key_rule(key: str, sensitive: bool) -> None:
    assert is_sensitive_key(key) is sensitive


def test_declared_names_ignore_case_and_separator_style() -> None:
    declared = {"apiKeyHeader"}

    assert redact({"api_key_header": "v", "API-KEY-HEADER": "w"}, sensitive_keys=declared) == {
        "api_key_header": REDACTED,
        "API-KEY-HEADER": REDACTED,
    }
    assert redact_text("api_key_header=v1", sensitive_keys=declared) == "api_key_header=[REDACTED]"


# ---------------------------------------------------------------- size cap


def test_oversized_payload_becomes_a_small_valid_stub_without_secrets() -> None:
    secrets = [case.secrets[0] for case in CORPUS]
    payload = {
        "rows": [
            {"i": i, "note": secrets[i % len(secrets)], "pad": "x" * 200} for i in range(2000)
        ],
        "tool": "export",
    }

    result = redact(payload, max_bytes=16384)

    encoded = json.dumps(result)
    assert json.loads(encoded) == result
    assert len(encoded) < 1024
    assert result["truncated"] is True and result["max_bytes"] == 16384
    assert result["bytes"] > 16384
    assert result["keys"] == ["rows", "tool"]
    assert_no_secret(encoded, secrets)
    rfc8785.dumps(result)


def test_payload_just_over_the_cap_is_stubbed_not_cut() -> None:
    secret = "ghp_" + rand(ALNUM, 36)
    payload = {"a": "x" * 150, "b": f"prefix {secret[:20]}"}  # half a token: not recognisable

    result = redact(payload, max_bytes=120)

    assert result["truncated"] is True
    assert secret[:20] not in json.dumps(result)


def test_cap_is_measured_after_redaction() -> None:
    payload = {"key_file": make_pem("RSA") * 12}  # ~20 kB of keys, redacted to ~130 bytes

    assert redact(payload, max_bytes=16384) == {"key_file": f"{REDACTED}\n" * 12}


def test_record_stores_a_stub_for_an_oversized_payload(db: Any, settings: Any) -> None:
    settings.MCPTASKS_AUDIT_MAX_DATA_BYTES = 2048

    event = record(
        action="export.finished",
        actor=Actor.system(),
        tenant_id=None,
        tenant_slug=None,
        data={"rows": ["r" * 100] * 100},
    )

    stored = AuditEvent.objects.get(pk=event.pk).data
    assert stored["truncated"] is True and stored["max_bytes"] == 2048


# ---------------------------------------------------------------- end to end through the writer


def stored_data_text(event: AuditEvent) -> str:
    """The ``data`` column as the database holds it, read with SQL rather than the ORM."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT data FROM {AuditEvent._meta.db_table} WHERE id = %s", [event.pk])
        (raw,) = cursor.fetchone()
    return raw if isinstance(raw, str) else json.dumps(raw)


@pytest.mark.django_db
def test_record_stores_no_secret_from_the_corpus() -> None:
    for case in CORPUS:
        event = record(
            action="task.created",
            actor=Actor.system(),
            tenant_id=None,
            tenant_slug=None,
            task_id=f"t-{case.name}"[:64],
            data={"tool": "deploy", "arguments": case.payload},
            sensitive_keys=case.sensitive_keys,
        )

        raw = stored_data_text(event)
        assert_no_secret(raw, case.secrets)
        assert_no_secret(dumped(json.loads(raw)), case.secrets)
        assert REDACTED in raw


@pytest.mark.django_db
def test_the_chain_hash_covers_the_redacted_data_as_stored() -> None:
    case = next(case for case in CORPUS if case.name == "postgres_url_in_error_message")
    event = record(
        action="task.failed",
        actor=Actor.system(),
        tenant_id=None,
        tenant_slug=None,
        data={"error": case.payload["error"]},
    )

    stored = AuditEvent.objects.get(pk=event.pk)
    body = event_body(
        chain=stored.chain,
        seq=stored.seq,
        created_at=stored.created_at.isoformat(),
        tenant_id=stored.tenant_id,
        actor_kind=stored.actor_kind,
        actor_id=stored.actor_id,
        actor_display=stored.actor_display,
        action=stored.action,
        task_id=stored.task_id,
        data=json.loads(stored_data_text(event)),
        request_id=stored.request_id,
    )
    assert link_hash(stored.prev_hash, body) == stored.hash


def test_task_creation_audit_redacts_arguments_and_a_real_api_token(
    make_task: Any, cast: dict[str, dict[str, Any]]
) -> None:
    real_token = cast["alice"]["token"]  # issued by ApiToken.issue: mcpt_<lookup>_<secret>
    lookup, secret = real_token.split("_", 2)[1:]
    pw = password()

    task = make_task(
        arguments={
            "text": f"call back with {real_token}; db postgres://app:{pw}@db/x",
            "nested": nest({"deploy_pin": "991177"}, "a", "b", "c", "d"),
        },
        sensitive_keys=frozenset({"deploy_pin"}),
    )

    event = AuditEvent.objects.get(task_id=task.pk, action="task.created")
    raw = stored_data_text(event)
    assert_no_secret(raw, [secret, pw, "991177"])
    assert lookup in raw  # the token's public lookup still says which token it was


# ---------------------------------------------------------------- robustness


def test_non_json_values_become_json_that_rfc8785_accepts() -> None:
    payload = {
        1: "int key",
        None: "none key",
        "when": dt.datetime(2026, 7, 28, 9, 0, tzinfo=dt.UTC),
        "id": uuid.UUID(int=7),
        "big": 2**70,
        "nan": float("nan"),
        "inf": float("inf"),
        "tuple": (1, 2),
        "set": {3},
        "bytes": b"\x00secret",
        "lone_surrogate": "a\ud800b",
        "card_int": int(luhn_number("4", 16)),
    }

    result = redact(payload)

    rfc8785.dumps(result)
    assert result["1"] == "int key" and result["null"] == "none key"
    assert result["when"] == "2026-07-28T09:00:00+00:00"
    assert result["big"] == str(2**70) and result["nan"] == "NaN"
    assert result["tuple"] == [1, 2] and result["set"] == [3]
    assert result["bytes"] == "[binary: 7 bytes]"
    assert result["lone_surrogate"] == "a?b"
    assert result["card_int"] == REDACTED


def test_deep_and_cyclic_values_do_not_crash() -> None:
    deep: Any = "leaf"
    for _ in range(500):
        deep = [deep]
    cyclic: dict[str, Any] = {"name": "loop"}
    cyclic["self"] = cyclic

    rfc8785.dumps(redact(deep, max_bytes=10**6))
    rfc8785.dumps(redact(cyclic, max_bytes=10**6))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5)
    ),
    max_leaves=30,
)


@settings(derandomize=True, max_examples=300, deadline=None)
@given(json_values)
def test_any_json_value_redacts_to_hashable_json_idempotently(value: Any) -> None:
    once = redact(value)

    rfc8785.dumps(once)
    assert redact(once) == once


# ---------------------------------------------------------------- speed


def test_a_one_megabyte_payload_is_redacted_well_under_a_second() -> None:
    rows = [
        {
            "id": str(uuid.UUID(int=i)),
            "message": f"step {i} ok; token_count={i}",
            "db": f"postgres://app:{rand(ALNUM, 12)}@db/x",
        }
        for i in range(12_000)
    ]
    payload = {"tool": "batch_export", "rows": rows}
    assert len(json.dumps(payload)) > 1_000_000

    started = time.process_time()
    result = redact(payload)  # the production cap: the walk stops once past it
    elapsed = time.process_time() - started

    assert result["truncated"] is True
    assert elapsed < 0.5
