"""API tokens: only a SHA-256 is stored, compared in constant time; revocation, expiry, scopes,
and a last-use stamp written at most once a minute (DESIGN §3)."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime, timedelta
from unittest import mock

import pytest
import time_machine
from django.db import connection
from django.utils import timezone

from mcptasks.models import ApiToken

pytestmark = pytest.mark.django_db


@pytest.fixture
def issued(cast):
    """A fresh token of alice and its plaintext."""
    return ApiToken.issue(user=cast["alice"]["user"], tenant=cast["alice"]["tenant"], name="laptop")


def test_issue_stores_only_the_sha256_of_the_secret(issued):
    token, plaintext = issued
    lookup, secret = ApiToken.split(plaintext)

    assert plaintext.startswith(f"mcpt_{token.lookup}_")
    assert lookup == token.lookup
    assert len(secret) * 6 >= 128  # url-safe base64: six bits a character
    assert token.secret_hash == hashlib.sha256(secret.encode()).hexdigest()
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {ApiToken._meta.db_table}")  # every column, every row
        cells = [str(cell) for row in cursor.fetchall() for cell in row]
    assert not [cell for cell in cells if secret in cell or plaintext in cell]


def test_lookup_finds_the_token_and_only_its_secret_matches(issued, cast):
    token, plaintext = issued
    _, other_plaintext = ApiToken.issue(user=cast["bob"]["user"], tenant=cast["bob"]["tenant"])
    lookup, secret = ApiToken.split(plaintext)

    found = ApiToken.objects.get(lookup=lookup)

    assert found == token
    assert found.matches(secret)
    assert not found.matches(secret[:-1] + ("A" if secret[-1] != "A" else "B"))
    assert not found.matches(ApiToken.split(other_plaintext)[1])
    assert not found.matches("")


def test_secret_is_compared_in_constant_time(issued):
    token, plaintext = issued
    _, secret = ApiToken.split(plaintext)

    with mock.patch(
        "mcptasks.models.principals.hmac.compare_digest", wraps=hmac.compare_digest
    ) as compare:
        assert token.matches(secret)

    compare.assert_called_once_with(token.secret_hash, hashlib.sha256(secret.encode()).hexdigest())


@pytest.mark.parametrize(
    "credential, parts",
    [
        ("mcpt_abc_secret", ("abc", "secret")),
        ("mcpt_abc_sec_ret", ("abc", "sec_ret")),  # url-safe secrets may contain underscores
        ("", None),
        ("mcpt", None),
        ("mcpt_abc", None),
        ("mcpt__secret", None),
        ("mcpt_abc_", None),
        ("ghp_abc_secret", None),
    ],
)
def test_split_accepts_only_the_token_shape(credential, parts):
    assert ApiToken.split(credential) == parts


def test_revoked_token_is_inactive(issued):
    token, _ = issued
    assert token.is_active()
    token.revoked_at = timezone.now()
    token.save(update_fields=["revoked_at"])
    assert not ApiToken.objects.get(pk=token.pk).is_active()


def test_token_is_inactive_from_its_expiry_on(cast):
    expires_at = timezone.now() + timedelta(days=1)
    token, _ = ApiToken.issue(
        user=cast["alice"]["user"], tenant=cast["alice"]["tenant"], expires_at=expires_at
    )
    assert token.is_active()
    with time_machine.travel(expires_at - timedelta(seconds=1), tick=False):
        assert token.is_active()
    with time_machine.travel(expires_at, tick=False):
        assert not token.is_active()
    assert not token.is_active(now=expires_at + timedelta(days=1))


@pytest.mark.parametrize(
    "held, asked, allowed",
    [
        (["mcp"], "mcp", True),
        (["mcp"], "mcp:tasks", True),
        (["mcp"], "mcp:tools", True),
        (["mcp"], "mcp:tasks:read", True),
        (["mcp:tasks"], "mcp:tasks", True),
        (["mcp:tasks"], "mcp", False),
        (["mcp:tasks"], "mcp:tools", False),
        (["mcp"], "mcpx", False),
        (["mcp"], "audit", False),
        (["audit:read", "mcp:tasks"], "mcp:tasks", True),
        ([], "mcp", False),
    ],
)
def test_scopes_are_hierarchical(held, asked, allowed, cast):
    token, _ = ApiToken.issue(
        user=cast["alice"]["user"], tenant=cast["alice"]["tenant"], scopes=held
    )
    assert token.has_scope(asked) is allowed


def test_issued_token_holds_the_mcp_scope_by_default(issued):
    token, _ = issued
    assert token.scopes == ["mcp"]
    assert token.has_scope("mcp:tasks")


def test_touch_writes_last_use_at_most_once_a_minute(issued, django_assert_num_queries):
    token, _ = issued
    stale_copy = ApiToken.objects.get(pk=token.pk)  # another request's copy, loaded earlier
    start = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)

    def stored() -> datetime | None:
        return ApiToken.objects.values_list("last_used_at", flat=True).get(pk=token.pk)

    with time_machine.travel(start, tick=False) as clock:
        token.touch()
        assert stored() == start

        clock.shift(timedelta(seconds=30))
        with django_assert_num_queries(0):
            token.touch()
        fresh = ApiToken.objects.get(pk=token.pk)
        with django_assert_num_queries(0):
            fresh.touch()
        stale_copy.touch()  # does not know of the first touch: the UPDATE's condition does
        assert stored() == start

        clock.shift(timedelta(seconds=31))
        token.touch()
        assert stored() == start + timedelta(seconds=61)
