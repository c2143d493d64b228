"""Bearer authentication of /mcp (PROTOCOL §1.7, §8.2) and conformance mode.

401 with a ``WWW-Authenticate: Bearer`` challenge for a missing, malformed, invalid, expired or
revoked token; 403 ``insufficient_scope`` for a token without the ``mcp`` scope; a token in the
query string is never read; the principal comes from the token alone. Conformance mode is off by
default and refused on a non-loopback address.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.core.management import CommandError, call_command
from django.utils import timezone

from audit.models import AuditEvent
from mcptasks.models import ApiToken, Task
from tests.protocol.conftest import (
    CheckedClient,
    asgi_request,
    mcp_headers,
    request_body,
)

pytestmark = pytest.mark.django_db(transaction=True)


def challenge_of(reply) -> str:
    assert reply.status in (401, 403), (reply.status, reply.body)
    challenge = reply.headers["www-authenticate"]
    assert challenge.startswith("Bearer "), challenge
    assert "result" not in (reply.body or {})
    return challenge


def unauthorized(reply) -> str:
    assert reply.status == 401, (reply.status, reply.body)
    return challenge_of(reply)


@pytest.fixture
def issue(cast):
    def make(name: str = "alice", **options) -> str:
        entry = cast[name]
        _, plaintext = ApiToken.issue(user=entry["user"], tenant=entry["tenant"], **options)
        return plaintext

    return make


def test_missing_token_is_401_with_a_bearer_challenge(db) -> None:
    reply = CheckedClient(None).call("tools/list")
    challenge = unauthorized(reply)
    assert 'scope="mcp"' in challenge


@pytest.mark.parametrize(
    "authorization",
    [
        "Bearer",
        "Bearer ",
        "Basic YWxpY2U6cGFzcw==",
        "Token abc",
        "bearer-mcpt_x_y",
        "Bearer mcpt_nope",
        "Bearer mcpt_000000000000_" + "x" * 43,
        "Bearer " + "a" * 5000,
        "Bearer mcpt__secret",
        "Bearer mcpt_lookup_",
    ],
)
def test_invalid_or_malformed_token_is_401(db, authorization: str) -> None:
    client = CheckedClient(None)
    reply = client.call("tools/list", headers={"authorization": authorization})
    unauthorized(reply)


def test_wrong_secret_for_a_real_lookup_is_401(cast) -> None:
    prefix, lookup, _secret = cast["alice"]["token"].split("_", 2)
    forged = f"{prefix}_{lookup}_{'A' * 43}"
    unauthorized(CheckedClient(forged).call("tools/list"))


def test_expired_token_is_401(issue) -> None:
    token = issue(expires_at=timezone.now() + timedelta(hours=1))
    client = CheckedClient(token)
    assert client.call("tools/list").status == 200
    with time_machine.travel(timezone.now() + timedelta(hours=2), tick=False):
        challenge = unauthorized(client.call("tools/list"))
    assert 'error="invalid_token"' in challenge


def test_revoked_token_is_401(cast) -> None:
    client = CheckedClient(cast["alice"]["token"])
    assert client.call("tools/list").status == 200
    ApiToken.objects.filter(user=cast["alice"]["user"]).update(revoked_at=timezone.now())
    assert 'error="invalid_token"' in unauthorized(client.call("tools/list"))


def test_token_of_a_deactivated_user_is_401(cast) -> None:
    client = CheckedClient(cast["alice"]["token"])
    user = cast["alice"]["user"]
    user.is_active = False
    user.save(update_fields=["is_active"])
    unauthorized(client.call("tools/list"))


def test_token_without_the_mcp_scope_is_403_insufficient_scope(issue) -> None:
    for scopes in ([], ["dashboard"], ["mcpx"], ["api:read"]):
        reply = CheckedClient(issue(scopes=scopes)).call("tools/list")
        assert reply.status == 403, scopes
        challenge = challenge_of(reply)
        assert 'error="insufficient_scope"' in challenge and 'scope="mcp"' in challenge


def test_scope_hierarchy_is_honoured(issue) -> None:
    assert CheckedClient(issue(scopes=["mcp"])).call("tools/list").status == 200


@pytest.mark.parametrize(
    "query", ["access_token={token}", "token={token}", "authorization=Bearer%20{token}"]
)
def test_token_in_the_query_string_is_never_accepted(cast, query: str) -> None:
    token = cast["alice"]["token"]
    body = json.dumps(request_body("tools/list")).encode()
    exchange = asgi_request(
        mcp_headers("tools/list"), body, query=query.format(token=token).encode()
    )
    assert exchange.status == 401


def test_principal_comes_from_the_token_only(cast, run_jobs) -> None:
    alice = CheckedClient(cast["alice"]["token"])
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}}
        },
        "io.modelcontextprotocol/clientInfo": {"name": "bob", "version": "1"},
        "principal": "bob",
        "user": "bob",
        "tenant": "globex",
    }
    reply = alice.call(
        "tools/call",
        {"name": "echo_task", "_meta": meta},
        headers={"x-forwarded-user": "bob", "x-remote-user": "bob", "x-mcptasks-tenant": "globex"},
    )
    task = Task.objects.get(pk=reply.result["taskId"])
    assert task.principal == cast["alice"]["user"]
    assert task.tenant == cast["alice"]["tenant"]
    created = AuditEvent.objects.get(task_id=task.pk, action="task.created")
    assert created.actor_id == str(cast["alice"]["user"].pk)
    # bob cannot see it, whatever alice's request claimed
    bob = CheckedClient(cast["bob"]["token"])
    assert bob.call("tasks/get", {"taskId": task.pk}).body["error"]["code"] == -32602


def test_every_method_is_authenticated(db) -> None:
    anonymous = CheckedClient(None)
    for method, params in [
        ("server/discover", {}),
        ("tools/list", {}),
        ("tools/call", {"name": "echo_task"}),
        ("tasks/get", {"taskId": "x"}),
        ("tasks/cancel", {"taskId": "x"}),
        ("tasks/update", {"taskId": "x", "inputResponses": {}}),
    ]:
        unauthorized(anonymous.call(method, params))
    assert not Task.objects.exists()


def test_protocol_errors_come_before_authentication(db) -> None:
    """§8.2: malformed requests get the protocol's own errors, even without a token."""
    anonymous = CheckedClient(None)
    reply = anonymous.call("tools/list", headers={"mcp-method": "tools/call"})
    assert reply.status == 400 and reply.body["error"]["code"] == -32020
    reply = anonymous.call("tools/list", {"_meta": {}})
    assert reply.status == 400 and reply.body["error"]["code"] == -32602
    # ...but no method is dispatched: an unknown method is still a 401 first
    assert anonymous.call("unknown/method").status == 401


# ---------------------------------------------------------------- conformance mode
def test_conformance_mode_is_off_by_default() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPTASKS_CONFORMANCE")}
    env["DJANGO_SETTINGS_MODULE"] = "mcptasks.settings"
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.MCPTASKS_CONFORMANCE_MODE)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    assert out.stdout.strip() == "False"


def test_without_conformance_mode_a_tokenless_request_is_401(db, settings) -> None:
    settings.MCPTASKS_CONFORMANCE_MODE = False
    exchange = asgi_request(
        mcp_headers("tools/list"), json.dumps(request_body("tools/list")).encode()
    )
    assert exchange.status == 401


def test_conformance_mode_maps_tokenless_requests_to_the_fixed_principal(db, settings) -> None:
    settings.MCPTASKS_CONFORMANCE_MODE = True
    exchange = asgi_request(
        mcp_headers("tools/list"), json.dumps(request_body("tools/list")).encode()
    )
    assert exchange.status == 200
    # a token, when sent, is still checked: an invalid one is not waved through
    headers = [*mcp_headers("tools/list"), (b"authorization", b"Bearer mcpt_bad_token")]
    assert asgi_request(headers, json.dumps(request_body("tools/list")).encode()).status == 401


@pytest.mark.parametrize(
    "host", ["0.0.0.0", "::", "192.168.1.10", "example.com", "[::]", "10.0.0.1"]
)
def test_serve_refuses_a_non_loopback_address_in_conformance_mode(
    settings, host: str, monkeypatch
) -> None:
    settings.MCPTASKS_CONFORMANCE_MODE = True
    started: list = []
    monkeypatch.setattr("mcptasks.embedded.start", lambda **kw: started.append(kw))
    monkeypatch.setattr("uvicorn.Server.run", lambda self, sockets=None: started.append(self))
    monkeypatch.setattr(
        "daphne.cli.CommandLineInterface.run", lambda self, args: started.append(args)
    )
    for server in ("uvicorn", "daphne"):
        with pytest.raises(CommandError, match="loopback"):
            call_command("serve", host=host, port=0, server=server)
    assert started == []  # refused before anything started


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_serve_allows_loopback_in_conformance_mode(settings, host: str, monkeypatch) -> None:
    settings.MCPTASKS_CONFORMANCE_MODE = True
    started: list = []
    monkeypatch.setattr("mcptasks.embedded.start", lambda **kw: started.append(kw))
    monkeypatch.setattr("uvicorn.Server.run", lambda self, sockets=None: started.append(self))
    monkeypatch.setattr(
        "daphne.cli.CommandLineInterface.run", lambda self, args: started.append(args)
    )
    call_command("serve", host=host, port=8123, no_worker=True)
    assert started and started[-1].config.host == host
    call_command("serve", host=host, port=8123, no_worker=True, server="daphne")
    assert started[-1][:2] == ["-b", host]


@pytest.mark.django_db
def test_the_token_statement_loads_what_the_orm_loads(cast):
    from mcptasks.auth import _load_token

    token = ApiToken.objects.get(user=cast["olga"]["user"])
    token.expires_at = timezone.now() + timedelta(days=3)
    token.last_used_at = timezone.now()
    token.scopes = ["mcp", "dashboard"]
    token.save()
    orm = ApiToken.objects.select_related("user", "tenant").get(lookup=token.lookup)
    loaded = _load_token(token.lookup)
    assert loaded is not None
    for left, right in ((orm, loaded), (orm.user, loaded.user), (orm.tenant, loaded.tenant)):
        for field in type(left)._meta.concrete_fields:
            assert getattr(left, field.attname) == getattr(right, field.attname), field.name
    assert loaded.scopes == ["mcp", "dashboard"]
    assert _load_token("nosuchlookup") is None


@pytest.mark.django_db
def test_the_fast_paths_row_is_the_token_row_with_the_owners_task_joined(cast, make_task):
    """fast_get reads auth's token row (one plan, one way to objects) with the membership and
    the owner's own task joined: the same token, user and tenant the ORM loads."""
    from django.db import connection

    from mcptasks.auth import token_row_plan
    from mcptasks.mcp.fast_get import FIELDS

    plan = token_row_plan(connection.alias, FIELDS)
    lookup = ApiToken.split(cast["alice"]["token"])
    assert lookup is not None
    mine, theirs = make_task("alice"), make_task("bob")

    def row_for(task_id: str) -> Any:
        with connection.cursor() as cursor:
            cursor.execute(plan.statement, plan.params(lookup[0], task_id))
            return plan.objects(cursor.fetchone())

    found = row_for(mine.pk)
    orm = ApiToken.objects.select_related("user", "tenant").get(lookup=lookup[0])
    for left, right, names in (
        (orm, found.token, FIELDS.token),
        (orm.user, found.token.user, FIELDS.user),
        (orm.tenant, found.token.tenant, FIELDS.tenant),
    ):
        assert names
        for name in names:
            assert getattr(left, name) == getattr(right, name), name
    assert found.member is True and found.task is not None
    for name in FIELDS.task:
        assert getattr(found.task, name) == getattr(mine, name), name
    # Another principal's task is never read: the row carries no task.
    assert row_for(theirs.pk).task is None
