"""The OpenAPI schema (drf-spectacular) and schemathesis against it.

schemathesis generates requests for every operation from the served schema and sends them,
authenticated, to the Django application through its WSGI interface: no response may be a
server error, and every response must match the schema (status code, content type, body,
headers). Part of the generated path parameters are swapped for ids of real objects, so the
requests reach the actions themselves and not only the 404 of an unknown id.
"""

from __future__ import annotations

import itertools
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from rest_framework.test import APIClient
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from mcptasks.lifecycle import InputSpec
from mcptasks.models import ApiToken, Effect, TaskState
from tests.api.conftest import ok

pytestmark = pytest.mark.django_db
S = TaskState
SCHEMA_URL = "/api/schema/?format=json"
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]
# Per operation and mode. Derandomized, so CI runs the same requests every time; raise it
# (MCPTASKS_API_FUZZ_EXAMPLES) to explore further.
EXAMPLES = int(os.environ.get("MCPTASKS_API_FUZZ_EXAMPLES", "14"))
MIN_REQUESTS = 150  # per mode: several hundred generated requests in all

# What the generated requests got, for the terminal summary (tests/api/conftest.py).
TALLY: Counter[str] = Counter()


# ---------------------------------------------------------------- the schema itself
def schema_document(client: APIClient) -> dict[str, Any]:
    response = client.get(SCHEMA_URL)
    assert response.status_code == 200
    return response.json()  # type: ignore[no-any-return]


def test_every_operation_is_described_with_its_problems(db: Any) -> None:
    document = schema_document(APIClient())
    assert document["openapi"].startswith("3.")
    operations = [
        (path, method, op)
        for path, item in document["paths"].items()
        for method, op in item.items()
    ]
    # issue 21 added approvals_list / _decide, approval_policies_list / _save and
    # reviewer_groups_list / _save
    assert len(operations) == 21
    assert len({op["operationId"] for _, _, op in operations}) == len(operations)
    for path, method, op in operations:
        where = f"{method.upper()} {path}"
        assert path.startswith("/api/v1/"), where
        assert op.get("summary") and op.get("description") and op.get("tags"), where
        assert {"bearerAuth": []} in op["security"], where
        success = [code for code in op["responses"] if code.startswith("2")]
        assert success, where
        for code, response in op["responses"].items():
            if code.startswith(("4", "5")):
                assert list(response["content"]) == ["application/problem+json"], where
        assert "401" in op["responses"], where
        if method == "post":
            assert "requestBody" in op and "422" in op["responses"], where
    assert document["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"


def test_docs_page_is_served(db: Any) -> None:
    response = APIClient().get("/api/docs/")
    assert response.status_code == 200 and b"swagger" in response.content.lower()


# ---------------------------------------------------------------- schemathesis
@contextmanager
def connection_kept() -> Iterator[None]:
    """Like Django's test client: a request must not close the test's connection (and with it
    the test's transaction) when it starts or finishes."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def api_schema(db: Any) -> Any:
    """The served schema, bound to the WSGI application that serves it."""
    with connection_kept():
        return schemathesis.openapi.from_wsgi(SCHEMA_URL, get_wsgi_application())


@pytest.fixture
def fuzz_world(task_in: Any, api_tokens: dict[str, str], api: Any) -> Iterator[dict[str, Any]]:
    """Real objects for generated requests to hit, the callers' tokens, and a tally of what
    the requests got (checked when the test ends)."""
    gate = [
        InputSpec(
            key="approve",
            method="elicitation/create",
            params={
                "message": "Go?",
                "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
            },
            audience="operator",
        )
    ]
    tasks = [task_in(S.AWAITING_OPERATOR, owner=owner, requests=gate) for owner in ("alice", "bob")]
    tasks += [task_in(S.NEEDS_RECONCILIATION, owner=owner) for owner in ("alice", "bob")]
    tasks += [task_in(state) for state in (S.RUNNING, S.AWAITING_INPUT, S.COMPLETED)]
    export = ok(api("olga").post("/api/v1/audit/exports", {"tenant": "acme"}), 201)
    world = {
        "task_id": [task.pk for task in tasks],
        "effect_id": [str(pk) for pk in Effect.objects.values_list("pk", flat=True)],
        "key": ["approve", "q"],
        # Tokens to revoke: any but the callers' own (the requests must stay authenticated).
        "token_id": [
            str(pk)
            for pk in ApiToken.objects.exclude(name__endswith=" api").values_list("pk", flat=True)
        ],
        "export_id": [export["id"]],
        "callers": [api_tokens[name] for name in ("olga", "alice", "carl", "amy")],
        "requests": Counter(),
    }
    yield world
    sent = sum(world["requests"].values())
    TALLY.update(world["requests"])
    assert sent >= MIN_REQUESTS, f"only {sent} generated requests were sent"


def operations(api_schema: Any) -> list[Any]:
    return [result.ok() for result in api_schema.get_all_operations()]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_generated_requests_never_fail_and_match_the_schema(
    api_schema: Any, fuzz_world: dict[str, Any], mode: GenerationMode
) -> None:
    # schemathesis' Python API rather than its pytest plugin (whose lazy fixture schemas do
    # not run on pytest 9): one Hypothesis run per operation, positive then negative data.
    turn = itertools.count()
    callers = fuzz_world["callers"]

    def send(case: Any) -> None:
        number = next(turn)
        if number % 2 == 0:  # every other request targets real objects
            for name in case.path_parameters or {}:
                if name in fuzz_world:
                    choices = fuzz_world[name]
                    case.path_parameters[name] = choices[number // 2 % len(choices)]
        token = callers[number % len(callers)]
        with connection_kept():
            response = case.call_and_validate(
                headers={"Authorization": f"Bearer {token}"}, checks=CHECKS
            )
        fuzz_world["requests"][f"{mode} {case.method} {case.path} -> {response.status_code}"] += 1

    failures = []
    for operation in operations(api_schema):
        run = settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )(given(case=operation.as_strategy(generation_mode=mode))(send))
        try:
            run()
        except (Exception, BaseExceptionGroup) as exc:  # report every operation's failures
            failures.append(f"{operation.method.upper()} {operation.path}: {exc}")
    assert not failures, "\n\n".join(failures)
