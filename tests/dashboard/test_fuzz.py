"""Fuzzing the dashboard (hypothesis): every route's path segments, query parameters and form
posts, signed in as an operator (olga) and as a member (alice).

For every input: never a 5xx, and no exception escapes a view (the test client re-raises one,
so hypothesis reports the request that caused it). The values mix what the database refuses
(NUL characters), bytes that are not UTF-8, Unicode and fullwidth digits where ids go,
cursors built of odd parts, date-times at the calendar's edges, and the real ids of the cast's
tasks, effects and tokens, so requests also reach the views past their 404s. Derandomized and
bounded (``MCPTASKS_DASHBOARD_FUZZ_EXAMPLES`` per test, 40 by default) so the suite stays fast.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcptasks.models import ApiToken, Effect, Task, TaskState
from mcptasks.queries import encode_cursor
from tests.core import conftest as core_fixtures

actors = core_fixtures.actors
task_in = core_fixtures.task_in

pytestmark = pytest.mark.django_db
S = TaskState
EXAMPLES = int(os.environ.get("MCPTASKS_DASHBOARD_FUZZ_EXAMPLES", "40"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
VIEWERS = ["olga", "alice"]

# ---------------------------------------------------------------- values
DIGITS = ["5", "²", "５", "٥", "𝟓", "1" * 19, "9" * 40, "-1", "0", "+5", "5\x00", " 5"]
NASTY = [
    "",
    "\x00",
    "a\x00b",
    "\ufeff",
    "\u202e",
    "é",
    "💥",
    "%00",
    "../../etc",
    "<script>",
    "' OR 1=1 --",
    "=cmd|' /C calc'!A0",
    "x" * 300,
    "0001-01-01T00:00:00+05:00",
    "9999-12-31T23:59:59-15:00",
    "2026-01-01T00:00:00+23:59",
    "2026-02-30",
    "2026-01-01",
    "true",
    "1e400",
    "NaN",
    *DIGITS,
]
text = st.sampled_from(NASTY) | st.text(max_size=20)
# What a form or query value may carry on the wire: any text, or bytes that are not UTF-8.
wire_value = text.map(lambda t: t.encode("utf-8")) | st.binary(max_size=20)
cursor_part = (
    text
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.booleans()
    | st.none()
    | st.floats(allow_nan=False)
    | st.lists(st.integers(), max_size=2)
)
cursor = (
    st.lists(cursor_part, max_size=3).map(lambda parts: encode_cursor(*parts))
    | st.binary(max_size=40).map(lambda raw: base64.urlsafe_b64encode(raw).decode().rstrip("="))
    | text
)


def world_values(world: dict[str, list[str]], kind: str) -> st.SearchStrategy[str]:
    """A real id of ``kind`` (most of the time), or a nasty one."""
    return st.sampled_from(world[kind]) | st.sampled_from(DIGITS + NASTY[:12])


def segment(world: dict[str, list[str]], kind: str) -> st.SearchStrategy[str]:
    """One percent-encoded path segment: a real id, odd text, or bytes that are not UTF-8."""
    return world_values(world, kind).map(lambda t: quote(t.encode("utf-8"), safe="")) | st.binary(
        min_size=1, max_size=12
    ).map(lambda raw: quote(raw, safe=""))


GET_PARAMS = [
    "q",
    "tenant",
    "state",
    "tool",
    "principal",
    "created_from",
    "created_to",
    "older",
    "newer",
    "fragment",
    "filtered",
    "actor",
    "action",
    "task",
    "since",
    "until",
    "chain",
    "format",
    "next",
]
FORM_FIELDS = [
    "reason",
    "confirm",
    "decision",
    "note",
    "external_ref",
    "grantee",
    "delegation",
    "tenant",
    "next",
    "action",
    "comment",
    "content",
    "approve",
    "name",
    "owner",
    "scopes",
    "expires_in_days",
    "format",
    "chain",
    "csrfmiddlewaretoken",
]


def query(params: dict[str, Any]) -> str:
    return urlencode(params, doseq=True)


# ---------------------------------------------------------------- fixtures
@pytest.fixture
def world(task_in: Any, cast: dict[str, Any]) -> dict[str, list[str]]:
    """The cast's objects for requests to reach: tasks in the states the dashboard acts on,
    an effect awaiting reconciliation, tokens and input-request keys."""
    tasks = [
        task_in(S.AWAITING_OPERATOR, owner="alice"),
        task_in(S.AWAITING_INPUT, owner="alice"),
        task_in(S.NEEDS_RECONCILIATION, owner="alice"),
        task_in(S.RUNNING, owner="bob"),
        task_in(S.COMPLETED, owner="alice"),
    ]
    return {
        "task": [task.pk for task in tasks],
        "key": ["approve", "q", "deploy"],
        "effect": [str(pk) for pk in Effect.objects.values_list("pk", flat=True)],
        "token": [str(pk) for pk in ApiToken.objects.values_list("pk", flat=True)],
        "event": ["1", "2", "3"],
        "user": [str(entry["user"].pk) for entry in cast.values()],
    }


def check(response: Any) -> None:
    if getattr(response, "streaming", False):
        b"".join(response.streaming_content)  # a view's error may wait in its stream
    assert response.status_code < 500, response.status_code


GET_PAGES = [
    ("", None),
    ("inbox/counts", None),
    ("tasks/", None),
    ("tasks/{}/", "task"),
    ("tasks/{}/row", "task"),
    ("tasks/{}/inputs/{}/", "task key"),
    ("effects/{}/reconcile", "effect"),
    ("audit/", None),
    ("audit/export", None),
    ("audit/verify", None),
    ("audit/{}/", "event"),
    ("tokens/", None),
]
POST_FORMS = [
    ("tenant", None),
    ("tasks/{}/cancel", "task"),
    ("tasks/{}/force-cancel", "task"),
    ("tasks/{}/delegations", "task"),
    ("tasks/{}/delegations/revoke", "task"),
    ("tasks/{}/inputs/{}/", "task key"),
    ("effects/{}/reconcile", "effect"),
    ("tokens/", None),
    ("tokens/{}/revoke", "token"),
    ("audit/export", None),
    ("audit/verify", None),
]


def fill(world: dict[str, list[str]], template: str, kinds: str | None, draw: Any) -> str:
    if kinds is None:
        return "/" + template
    parts = [draw(segment(world, kind)) for kind in kinds.split()]
    return "/" + template.format(*parts)


# ---------------------------------------------------------------- the fuzzers
@pytest.mark.parametrize("viewer", VIEWERS)
def test_fuzz_dashboard_pages_with_odd_ids_and_query_parameters(
    client_for: Any, world: dict[str, list[str]], viewer: str
) -> None:
    client = client_for(viewer)

    @FUZZ
    @given(
        page=st.sampled_from(GET_PAGES),
        params=st.dictionaries(
            st.sampled_from(GET_PARAMS),
            wire_value | cursor.map(str.encode) | st.lists(wire_value, max_size=3),
            max_size=4,
        ),
        data=st.data(),
    )
    def run(page: tuple[str, str | None], params: dict[str, Any], data: Any) -> None:
        path = fill(world, *page, data.draw)
        check(client.get(f"{path}?{query(params)}" if params else path))

    run()


@pytest.mark.parametrize("viewer", VIEWERS)
def test_fuzz_dashboard_cursors(client_for: Any, world: dict[str, list[str]], viewer: str) -> None:
    client = client_for(viewer)
    real = Task.objects.order_by("-created_at").first()
    assert real is not None

    @FUZZ
    @given(
        page=st.sampled_from(["/tasks/", "/audit/"]),
        direction=st.sampled_from(["older", "newer"]),
        value=cursor
        | st.tuples(text, st.sampled_from(world["task"]) | text).map(
            lambda parts: encode_cursor(*parts)
        )
        | st.sampled_from(
            [
                encode_cursor(real.created_at, "a\x00b"),
                encode_cursor("9999-12-31T23:59:59-15:00", real.pk),
                encode_cursor("0001-01-01T00:00:00+05:00", real.pk),
                encode_cursor("2026-01-01T00:00:00+23:59", real.pk),
                encode_cursor(2**70),
                encode_cursor(-1),
                encode_cursor(True),
                base64.urlsafe_b64encode(b"[" * 5000).decode(),
                base64.urlsafe_b64encode(json.dumps(["\udaf1", "x"]).encode()).decode(),
            ]
        ),
    )
    def run(page: str, direction: str, value: str) -> None:
        check(client.get(f"{page}?{query({direction: value})}"))

    run()


@pytest.mark.parametrize("viewer", VIEWERS)
def test_fuzz_dashboard_form_posts(
    client_for: Any, world: dict[str, list[str]], viewer: str
) -> None:
    client = client_for(viewer)

    @FUZZ
    @given(
        form=st.sampled_from(POST_FORMS),
        fields=st.dictionaries(
            st.sampled_from(FORM_FIELDS) | text.map(lambda t: t[:10]),
            wire_value
            | st.sampled_from(world["user"] + world["task"]).map(str.encode)
            | st.lists(wire_value, max_size=3),
            max_size=6,
        ),
        data=st.data(),
    )
    def run(form: tuple[str, str | None], fields: dict[Any, Any], data: Any) -> None:
        path = fill(world, *form, data.draw)
        body = query({key.encode("utf-8"): value for key, value in fields.items()})
        check(client.post(path, body, content_type="application/x-www-form-urlencoded"))

    run()


# ---------------------------------------------------------------- regressions found by fuzzing
@pytest.mark.parametrize(
    "path",
    [
        "/tasks/ab%00cd/",
        "/tasks/{task}%00/",
        "/tasks/{task}/row%00",
        "/tasks/{task}/inputs/app%00rove/",
        "/tasks/%00/cancel",
        "/effects/%EF%BC%95/reconcile",
        "/tokens/%C2%B2/revoke",
    ],
)
def test_nul_and_unicode_digits_in_dashboard_paths_are_404(
    client_for: Any, world: dict[str, list[str]], path: str
) -> None:
    client = client_for("olga")
    url = path.format(task=world["task"][0])
    assert client.get(url).status_code == 404
    assert client.post(url, {"reason": "x", "confirm": "on"}).status_code in (404, 405)


def test_a_fullwidth_user_id_revokes_no_delegation(
    client_for: Any, world: dict[str, list[str]], users: dict[str, Any]
) -> None:
    from mcptasks import access

    task = Task.objects.get(pk=world["task"][0])
    olga = client_for("olga")
    adam = str(users["adam"].pk)
    grant = {"grantee": adam, "delegation": "answer"}
    assert olga.post(f"/tasks/{task.pk}/delegations", grant).status_code == 302
    fullwidth = "".join(chr(0xFF10 + int(digit)) for digit in adam)
    revoke = {"grantee": fullwidth, "delegation": "answer"}
    assert olga.post(f"/tasks/{task.pk}/delegations/revoke", revoke).status_code == 404
    assert (users["adam"], "answer") in access.delegations_of(task)
