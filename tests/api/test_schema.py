"""The OpenAPI schema (drf-spectacular) and schemathesis against it.

schemathesis generates requests for every operation from the served schema and sends them,
authenticated, to the Django application through its WSGI interface: no response may be a
server error, and every response must match the schema (status code, content type, body,
headers). Part of the generated path parameters are swapped for ids of real objects, so the
requests reach the actions themselves and not only the 404 of an unknown id.

Twists are what schemathesis rarely generates on its own (and what answered 500 in issue 19):
a real id in Unicode or fullwidth digits or with a NUL, a cursor that decodes but names a
position that is no value of the ordering field, a NUL or a lone surrogate in a body string, a
body nesting deeper than the API reads, a bearer token holding a NUL. About two generated
requests in three get one (the token aside); then every twist runs once on every operation it
applies to, where an odd id must be a 404 (never another object), a bad cursor a 422, a
too-deep body a 400 and such a token a 401.
"""

from __future__ import annotations

import base64
import itertools
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from mcptasks import limits
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

# ---------------------------------------------------------------- twists
# Digits str.isdigit() accepts that are not ASCII, and other near-ids.
ODD_IDS = ["²", "５", "٥", "𝟓", "¹²", "5\x00", "1" * 19, " 5", "+5", "-1", "0x5", "5.0"]
POSITIONS = [
    "2026",  # the finding: cursor=cD0yMDI2 was a 500
    "abc",
    "2026-01-01 00:00:00",
    "2026-01-01 00:00:00+00:00\x00",
    "0001-01-01 00:00:00+05:00",
    "9999-12-31 23:59:59-15:00",
    "2026-01-01 00:00:00+23:59",
    "５",
    "9" * 30,
    "-1",
]
drf_cursor = st.dictionaries(
    st.sampled_from(["o", "r", "p"]),
    st.sampled_from([*POSITIONS, "５", "1", "0", "-5", "99999"]) | st.text(max_size=8),
    min_size=1,
).map(lambda parts: base64.b64encode(urlencode(parts).encode()).decode())
TWIST = st.one_of(
    st.tuples(st.just("id"), st.sampled_from([*ODD_IDS, "widen", "nul"]), st.integers(0, 1)),
    st.tuples(st.just("cursor"), drf_cursor),
    st.tuples(st.just("text"), st.sampled_from(["a\x00b", "\udaf1", "\x00", "\udc00x", "٥", "＄"])),
    st.tuples(st.just("depth"), st.sampled_from([65, 300, 900])),
)
TWISTS = st.none() | TWIST | TWIST  # about two requests in three


def widen(value: str) -> str:
    """``value`` in fullwidth letters and digits (a fullwidth 5 once resolved to token 5)."""
    return "".join(chr(ord(c) + 0xFEE0) if c.isascii() and c.isalnum() else c for c in value)


def twist(case: Any, change: tuple[Any, ...]) -> None:
    """Apply one twist to a generated case whose path names real objects: one path id, the
    cursor, or one body field."""
    kind = change[0]
    if kind == "id" and case.path_parameters:
        names = sorted(case.path_parameters)
        name = names[change[2] % len(names)]
        value = str(case.path_parameters[name])
        odd = change[1]
        case.path_parameters[name] = (
            widen(value) if odd == "widen" else value + "\x00" if odd == "nul" else odd
        )
    elif kind == "cursor" and "cursor" in {parameter.name for parameter in case.operation.query}:
        case.query = {**(case.query or {}), "cursor": change[1]}
    elif kind in ("text", "depth") and isinstance(case.body, dict):
        value: Any = change[1]
        if kind == "depth":
            value = "x"
            for _ in range(change[1]):
                value = [value]
        # In place, not through the setter: a replaced body is revalidated by schemathesis
        # before sending, and its validator cannot encode a lone surrogate (it raises
        # UnicodeEncodeError on the client side, so the request would never be sent).
        case.body[next(iter(case.body), "reason")] = value


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
    # issue 21 added approvals_list / _decide, approval_policies_list / _save / _delete and
    # reviewer_groups_list / _save; issue 24 destinations_list / _create / _get / _change /
    # _delete / _deliveries / _redeliver
    assert len(operations) == 29
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
def fuzz_world(
    task_in: Any, api_tokens: dict[str, str], api: Any, settings: Any
) -> Iterator[dict[str, Any]]:
    """Real objects for generated requests to hit, the callers' tokens, and a tally of what
    the requests got (checked when the test ends)."""
    # Generated ids are mostly unknown: past the unknown-id budget every request would stop at
    # the throttle (429, documented) before the handler the fuzzing is for. The throttle has
    # its own tests (tests/limits/test_abuse_limits.py).
    settings.MCPTASKS_UNKNOWN_TASK_BURST = 100_000
    limits.buckets().reset()
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
    rule = ok(
        api("amy").post(
            "/api/v1/approval-policies", {"tool": "deploy_service", "roles": ["operator"]}
        ),
        201,
    )
    destination, dead = a_destination_with_a_dead_letter()
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
        "rule_id": [str(rule["id"])],
        # A destination of acme and a dead-lettered delivery of it (issue 24).
        "destination_id": [str(destination.pk)],
        "delivery_id": [str(dead.pk)],
        "callers": [api_tokens[name] for name in ("olga", "alice", "carl", "amy")],
        "requests": Counter(),
        "twisted": Counter(),
    }
    yield world
    sent = sum(world["requests"].values())
    TALLY.update(world["requests"])
    assert sent >= MIN_REQUESTS, f"only {sent} generated requests were sent"
    twisted = sum(world["twisted"].values())
    assert twisted >= sent // 4, f"only {twisted} of {sent} requests were twisted"


def a_destination_with_a_dead_letter() -> tuple[Any, Any]:
    from django.contrib.auth import get_user_model

    from audit.record import Actor
    from mcptasks.models import Delivery, DeliveryState, Tenant
    from mcptasks.outbox import destinations
    from mcptasks.sinks.webhook import new_secret

    amy = get_user_model().objects.get(username="amy")
    destination = destinations.create(
        tenant=Tenant.objects.get(slug="acme"),
        actor=Actor.for_user(amy),
        created_by=amy,
        name="fuzzed",
        kind="webhook",
        config={"url": "http://127.0.0.1:9/hook"},
        secret=new_secret(),
        events=["task.completed"],
    )
    dead = Delivery.objects.create(
        destination=destination,
        tenant=destination.tenant,
        event_id="evt_fuzz",
        event_type="task.completed",
        ordering_key="task:x",
        state=DeliveryState.DEAD,
    )
    return destination, dead


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

    def send(case: Any, change: tuple[Any, ...] | None) -> None:
        number = next(turn)
        if number % 2 == 0 or change is not None:  # a twist, or every other: real objects
            for name in case.path_parameters or {}:
                if name in fuzz_world:
                    choices = fuzz_world[name]
                    case.path_parameters[name] = choices[number // 2 % len(choices)]
        if change is not None:
            twist(case, change)
        token = callers[number % len(callers)]
        with connection_kept():
            response = case.call_and_validate(
                headers={"Authorization": f"Bearer {token}"}, checks=CHECKS
            )
        fuzz_world["requests"][f"{mode} {case.method} {case.path} -> {response.status_code}"] += 1
        if change is not None:
            fuzz_world["twisted"][f"{case.method} {case.path} -> {response.status_code}"] += 1

    failures = []
    for operation in operations(api_schema):
        run = settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )(given(case=operation.as_strategy(generation_mode=mode), change=TWISTS)(send))
        try:
            run()
        except (Exception, BaseExceptionGroup) as exc:  # report every operation's failures
            failures.append(f"{operation.method.upper()} {operation.path}: {exc}")
    assert not failures, "\n\n".join(failures)


def every_twist(operation: Any) -> list[tuple[Any, ...]]:
    """Each twist that applies to ``operation``, once (the random run above samples them)."""
    twists: list[tuple[Any, ...]] = []
    names = sorted(parameter.name for parameter in operation.path_parameters)
    for index in range(len(names)):
        twists += [("id", odd, index) for odd in [*ODD_IDS, "widen", "nul"]]
    if "cursor" in {parameter.name for parameter in operation.query}:
        for position in POSITIONS:
            twists.append(
                ("cursor", base64.b64encode(urlencode({"p": position}).encode()).decode())
            )
        for offset in ("５", "-5", "99999", "x"):
            twists.append(("cursor", base64.b64encode(urlencode({"o": offset}).encode()).decode()))
    twists += [("auth", credential) for credential in ["mcpt_ab\x00c_def", "mcpt_\udaf1_x"]]
    if operation.method.lower() == "post":
        twists += [("text", text) for text in ["a\x00b", "\udaf1", "\x00", "\udc00x"]]
        twists += [("depth", depth) for depth in (65, 300, 900)]
    return twists


def test_every_operation_survives_odd_ids_cursors_and_bodies(
    api_schema: Any, fuzz_world: dict[str, Any]
) -> None:
    """Every twist on every operation it applies to, on real objects, as an operator: never a
    server error, and an odd id never names an object (a fullwidth 5 once revoked token 5)."""
    olga = fuzz_world["callers"][0]
    failures = []
    for operation in operations(api_schema):
        for change in every_twist(operation):
            real = {
                parameter.name: str(fuzz_world[parameter.name][0])
                for parameter in operation.path_parameters
            }
            post = operation.method.lower() == "post"
            case = operation.Case(
                path_parameters=real,
                body={"reason": "fuzz"} if post else schemathesis.core.NOT_SET,
                media_type="application/json" if post else None,
            )
            twist(case, change)
            with connection_kept():
                try:
                    credential = change[1] if change[0] == "auth" else olga
                    response = case.call_and_validate(
                        headers={"Authorization": f"Bearer {credential}"}, checks=CHECKS
                    )
                except (Exception, BaseExceptionGroup) as exc:
                    failures.append(
                        f"{operation.method.upper()} {operation.path} {change!r}: {exc}"
                    )
                    continue
            fuzz_world["requests"][
                f"twists {case.method} {case.path} -> {response.status_code}"
            ] += 1
            fuzz_world["twisted"][f"{case.method} {case.path} -> {response.status_code}"] += 1
            status = response.status_code
            expected = {
                "id": {404},
                "cursor": {200, 422},
                "depth": {400},
                "text": {422},
                "auth": {401},
            }
            if status not in expected[change[0]] and not (
                change[0] in ("text", "depth") and status in (403, 404, 409)
            ):
                failures.append(f"{operation.method.upper()} {operation.path} {change!r}: {status}")
    assert not failures, "\n".join(failures)
