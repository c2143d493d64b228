"""Answer validation is lifecycle's rule: task_answer_input refuses an answer that does not fit
its request and writes nothing, with the reason every channel shows."""

from __future__ import annotations

import pytest

from mcptasks import lifecycle
from mcptasks.models import InputKind, TaskState
from mcptasks.tools.context import ELICIT

pytestmark = pytest.mark.django_db

SCHEMA = {
    "requestedSchema": {
        "type": "object",
        "properties": {"count": {"type": "integer"}},
        "required": ["count"],
    }
}


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        ("yes", "the response must be an object"),
        ({"action": "maybe"}, "action must be one of accept, decline, cancel"),
        ({"action": "accept", "content": {"count": "three"}}, "count: 'three' is not of type"),
    ],
)
def test_task_answer_input_refuses_an_answer_that_does_not_fit_and_writes_nothing(
    task_in, actors, snapshot, response, reason
):
    request = lifecycle.InputSpec(key="q", method=ELICIT, params=SCHEMA)
    task = task_in(TaskState.AWAITING_INPUT, requests=[request])
    before = snapshot(task.pk)

    with pytest.raises(lifecycle.InvalidAnswer, match=reason):
        lifecycle.task_answer_input(
            task_id=task.pk, key="q", response=response, actor=actors["alice"], via="api"
        )

    assert snapshot(task.pk) == before


def test_validated_answer_is_the_stored_form_and_checks_an_approvals_verdict():
    declined = {"action": "decline", "content": {"ignored": True}}
    assert lifecycle.validated_answer(method=ELICIT, params=SCHEMA, response=declined) == {
        "action": "decline"
    }
    reject = {"action": "accept", "content": {"decision": "reject"}}
    with pytest.raises(lifecycle.InvalidAnswer, match="a reject needs a comment"):
        lifecycle.validated_answer(
            method=ELICIT, params={}, response=reject, kind=InputKind.APPROVAL
        )
