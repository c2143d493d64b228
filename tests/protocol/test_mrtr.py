"""MRTR security and effects (PROTOCOL §3.3, DESIGN §4 "Inline execution and MRTR").

A requestState that was tampered with, has expired, belongs to another principal, or was issued
for another tool or other arguments is refused with a clear -32602 and nothing runs. An inline
tool's effect runs only after its last question, and never twice across rounds.
"""

from __future__ import annotations

import base64
import json
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from audit.models import AuditEvent
from mcptasks.models import Task
from tests import toolpack
from tests.protocol.conftest import CheckedClient, assert_error_response

pytestmark = pytest.mark.django_db(transaction=True)

TOOL = "mrtr_confirm_then_apply"
ACCEPT_OK = {"action": "accept", "content": {"ok": True}}


@pytest.fixture(autouse=True)
def _probes():
    toolpack.PROTOCOL_PROBES.clear()
    yield
    toolpack.PROTOCOL_PROBES.clear()


def runs() -> int:
    return toolpack.PROTOCOL_PROBES["confirm_then_apply.runs"]


def first_round(client: CheckedClient, arguments: dict | None = None) -> dict:
    result = client.call("tools/call", {"name": TOOL, "arguments": arguments or {}}).result
    assert result["resultType"] == "input_required"
    return result


def retry(
    client: CheckedClient,
    state,
    *,
    name: str = TOOL,
    arguments: dict | None = None,
    responses: dict | None = None,
):
    params = {
        "name": name,
        "arguments": arguments or {},
        "inputResponses": {"confirm": ACCEPT_OK} if responses is None else responses,
        "requestState": state,
    }
    return client.call("tools/call", params)


def refused(reply, words: str) -> None:
    error = assert_error_response(reply.status, reply.body)
    assert error["code"] == -32602, error
    assert words in error["message"], error["message"]


def tamper(state: str) -> list[str]:
    raw = base64.urlsafe_b64decode(state)
    flipped_byte = raw[:30] + bytes([raw[30] ^ 1]) + raw[31:]
    return [
        state + "-TAMPERED",  # a suffix after the padding (Fernet alone ignores it)
        base64.urlsafe_b64encode(flipped_byte).decode(),  # one bit of the ciphertext
        base64.urlsafe_b64encode(raw[:-1]).decode(),  # truncated MAC
        state[:-4],
        state.rstrip("=") + "==",
        " " + state,
        "",
        "not a state",
    ]


def test_tampered_request_state_is_refused_and_nothing_runs(checked: CheckedClient) -> None:
    state = first_round(checked)["requestState"]
    assert runs() == 1
    for bad in tamper(state):
        refused(retry(checked, bad), "requestState")
    for wrong_type in (123, {"state": state}, [state], True):
        refused(retry(checked, wrong_type), "requestState")
    assert runs() == 1 and toolpack.PROTOCOL_PROBES["apply"] == 0


def test_request_state_from_another_key_is_refused(checked: CheckedClient, settings) -> None:
    state = first_round(checked)["requestState"]
    settings.REQUEST_STATE_KEY = "another-deployment-key"
    refused(retry(checked, state), "failed verification")
    assert runs() == 1


def test_expired_request_state_is_refused_and_nothing_runs(checked: CheckedClient) -> None:
    state = first_round(checked)["requestState"]
    with time_machine.travel(timezone.now() + timedelta(minutes=16), tick=False):
        refused(retry(checked, state), "expired")
    assert runs() == 1 and toolpack.PROTOCOL_PROBES["apply"] == 0
    # within its lifetime it still works
    with time_machine.travel(timezone.now() + timedelta(minutes=14), tick=False):
        result = retry(checked, state).result
    assert result["content"][0]["text"].startswith("apply applied")


def test_another_principals_request_state_is_refused(checked_for) -> None:
    alice = checked_for("alice")
    state = first_round(alice)["requestState"]
    for name in ("adam", "bob", "olga"):  # same tenant, other tenant, an operator
        refused(retry(checked_for(name), state), "another principal")
    assert runs() == 1 and toolpack.PROTOCOL_PROBES["apply"] == 0


def test_request_state_for_other_arguments_or_tool_is_refused(checked: CheckedClient) -> None:
    state = first_round(checked, {"target": "staging"})["requestState"]
    refused(retry(checked, state, arguments={"target": "production"}), "different tool")
    refused(retry(checked, state, name="mrtr_two_rounds_then_apply"), "different tool")
    assert runs() == 1
    ok = retry(checked, state, arguments={"target": "staging"}).result
    assert ok["resultType"] == "complete" and runs() == 2


def test_refusals_store_nothing(checked: CheckedClient) -> None:
    state = first_round(checked)["requestState"]
    for bad in tamper(state):
        retry(checked, bad)
    assert not Task.objects.exists() and not AuditEvent.objects.exists()


def test_request_state_is_not_readable_by_the_client(checked: CheckedClient) -> None:
    state = first_round(checked, {"target": "secret-cluster"})["requestState"]
    decoded = base64.urlsafe_b64decode(state)
    assert b"secret-cluster" not in decoded and b"confirm" not in decoded
    with pytest.raises(ValueError):
        json.loads(decoded)


# ---------------------------------------------------------------- effects across rounds
def test_inline_effect_runs_only_after_the_last_question(checked: CheckedClient) -> None:
    first = checked.call("tools/call", {"name": "mrtr_two_rounds_then_apply"}).result
    assert toolpack.PROTOCOL_PROBES["two_rounds.apply"] == 0
    second = retry(
        checked,
        first["requestState"],
        name="mrtr_two_rounds_then_apply",
        responses={"name": {"action": "accept", "content": {"name": "Ann"}}},
    ).result
    assert second["resultType"] == "input_required"
    assert toolpack.PROTOCOL_PROBES["two_rounds.apply"] == 0  # still a question to go
    done = retry(
        checked,
        second["requestState"],
        name="mrtr_two_rounds_then_apply",
        responses={"confirm": ACCEPT_OK},
    ).result
    assert done["resultType"] == "complete"
    assert toolpack.PROTOCOL_PROBES["two_rounds.apply"] == 1


def test_a_question_after_an_effect_is_refused_so_no_round_repeats_it(
    checked: CheckedClient,
) -> None:
    reply = checked.call("tools/call", {"name": "mrtr_effect_before_ask"})
    error = assert_error_response(reply.status, reply.body)
    assert error["code"] == -32603 and "effect only after its last question" in error["message"]
    # the refusal is an error, never an InputRequiredResult: no retry round can repeat it
    assert toolpack.PROTOCOL_PROBES["early"] == 1


def test_no_effect_runs_twice_across_rounds(checked: CheckedClient) -> None:
    first = first_round(checked)
    done = retry(checked, first["requestState"]).result
    assert done["content"][0]["text"].startswith("apply applied")
    assert toolpack.PROTOCOL_PROBES["apply"] == 1
    # Answering the same round again is a new call of the tool, not a repeat of a round: the
    # server keeps no state, so each completed call is one run with one effect.
    extra_keys = retry(
        checked, first["requestState"], responses={"confirm": ACCEPT_OK, "other": ACCEPT_OK}
    ).result
    assert extra_keys["resultType"] == "complete"
    assert toolpack.PROTOCOL_PROBES["apply"] == 2
    assert runs() == 3  # three runs of the body; the first stopped at the question


def test_answers_of_earlier_rounds_cannot_be_replaced(checked: CheckedClient) -> None:
    first = checked.call("tools/call", {"name": "mrtr_two_rounds_then_apply"}).result
    second = retry(
        checked,
        first["requestState"],
        name="mrtr_two_rounds_then_apply",
        responses={"name": {"action": "accept", "content": {"name": "Ann"}}},
    ).result
    assert second["inputRequests"]["confirm"]["params"]["message"] == "Apply for Ann?"
    # a new value for "name" next round is ignored: the sealed state already answers it
    third = retry(
        checked,
        second["requestState"],
        name="mrtr_two_rounds_then_apply",
        responses={"name": {"action": "accept", "content": {"name": "Eve"}}},
    ).result
    assert third["inputRequests"]["confirm"]["params"]["message"] == "Apply for Ann?"


def test_extra_and_unknown_response_keys_are_ignored(checked: CheckedClient) -> None:
    first = first_round(checked)
    result = retry(
        checked,
        first["requestState"],
        responses={
            "confirm": ACCEPT_OK,
            "unknown": {"action": "accept", "content": {"x": 1}},
            "also": 12345,
        },
    ).result
    assert result["resultType"] == "complete"


def test_missing_answer_is_asked_again(checked: CheckedClient) -> None:
    first = first_round(checked)
    again = retry(checked, first["requestState"], responses={"wrong_key": ACCEPT_OK}).result
    assert again["resultType"] == "input_required"
    assert list(again["inputRequests"]) == ["confirm"]
    assert toolpack.PROTOCOL_PROBES["apply"] == 0


# ---------------------------------------------------------------- who may answer
def test_a_question_only_someone_else_may_answer_is_never_asked_inline(
    checked: CheckedClient,
) -> None:
    """An approval gate (operator audience, no self-approval) asked inline would be answered by
    the caller itself: without the tasks extension the call needs a task (-32021)."""
    reply = checked.call("tools/call", {"name": "operator_gate"}, capabilities={"elicitation": {}})
    error = assert_error_response(reply.status, reply.body)
    assert error["code"] == -32021
    assert error["data"]["requiredCapabilities"] == {
        "extensions": {"io.modelcontextprotocol/tasks": {}}
    }
    assert not Task.objects.exists()
    # with the extension it becomes a task, where operators answer it
    created = checked.call("tools/call", {"name": "operator_gate"}).result
    assert created["resultType"] == "task"
