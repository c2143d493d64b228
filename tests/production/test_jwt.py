"""JWT access tokens from an external authorization server (keys generated in the test)."""

from __future__ import annotations

import json
import time

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.protocol.conftest import McpClient

pytestmark = pytest.mark.django_db(transaction=True)
ISSUER = "https://auth.example.test/"
AUDIENCE = "https://mcp.example.test/mcp"


@pytest.fixture
def signing(tmp_path, settings):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    public.update({"kid": "k1", "use": "sig", "alg": "RS256"})
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [public]}))
    settings.MCPTASKS_JWT_ISSUER = ISSUER
    settings.MCPTASKS_JWT_AUDIENCE = AUDIENCE
    settings.MCPTASKS_JWT_JWKS_FILE = str(jwks)
    settings.MCPTASKS_JWT_JWKS_URL = ""
    return key


def token(key, **overrides) -> str:
    claims = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "alice",
        "tenant": "acme",
        "scope": "mcp",
        "exp": int(time.time()) + 300,
        **overrides,
    }
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})


def test_valid_jwt_authenticates_as_the_mapped_principal(cast, signing):
    reply = McpClient(token(signing)).tool("echo_task", {"text": "jwt"})
    assert reply.status == 200
    from mcptasks.models import Task

    task = Task.objects.get(pk=reply.result["taskId"])
    assert task.principal.username == "alice" and task.tenant.slug == "acme"


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"aud": "https://someone-else.example/mcp"}, "not issued for this server"),
        ({"exp": int(time.time()) - 10}, "expired"),
        ({"iss": "https://evil.example/"}, "unexpected issuer"),
        ({"tenant": "globex"}, "not a member"),
    ],
)
def test_rejected_jwt_is_401_with_a_reason(cast, signing, overrides, reason):
    reply = McpClient(token(signing, **overrides)).call("server/discover")
    assert reply.status == 401
    assert reason in reply.body["error_description"]
    assert "resource_metadata=" in reply.headers["www-authenticate"]


def test_jwt_with_a_bad_signature_is_401(cast, signing):
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    reply = McpClient(token(other)).call("server/discover")
    assert reply.status == 401
    assert "invalid" in reply.body["error_description"]


def test_jwt_without_the_mcp_scope_is_403_insufficient_scope(cast, signing):
    reply = McpClient(token(signing, scope="api")).call("server/discover")
    assert reply.status == 403
    assert 'error="insufficient_scope"' in reply.headers["www-authenticate"]


def test_protected_resource_metadata_is_served(client, settings):
    for path in (
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ):
        body = client.get(path, secure=True).json()
        assert body["resource"].endswith("/mcp")
        assert body["authorization_servers"]
        assert "offline_access" not in body["scopes_supported"]
