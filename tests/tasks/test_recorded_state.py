"""A run's recorded state (steps, input requests, effects) is read in one statement (issue 23)
and loads as the ORM would: the same instances, values converted to their Python types."""

from __future__ import annotations

from datetime import datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from mcptasks.models import Effect, EffectState, InputRequest, TaskStep
from mcptasks.task_context import recorded_state

pytestmark = pytest.mark.django_db(transaction=True)


def test_recorded_state_is_one_statement_and_matches_the_orm(cast, make_task):
    task, other = make_task("alice"), make_task("alice")
    TaskStep.objects.create(task_id=task.pk, key="now#1", kind="now", value={"at": [1, "x"]})
    TaskStep.objects.create(task_id=other.pk, key="now#1", kind="now", value=1)
    Effect.objects.create(
        task_id=task.pk,
        tenant_id=task.tenant_id,
        step="charge",
        idempotency_key="k",
        state=EffectState.INTENDED,
        result={"ok": True},
        attempt=2,
    )

    with CaptureQueriesContext(connection) as queries:
        steps, inputs, effects = recorded_state(task.pk)

    assert len(queries) == 1
    assert [(s.pk, s.key, s.value) for s in steps] == [
        (s.pk, s.key, s.value) for s in TaskStep.objects.filter(task_id=task.pk)
    ]
    assert inputs == list(InputRequest.objects.filter(task_id=task.pk)) == []
    (effect,) = effects
    expected = Effect.objects.get(task_id=task.pk)
    assert effect == expected
    assert (effect.result, effect.attempt, effect.idempotent) == ({"ok": True}, 2, False)
    assert isinstance(effect.created_at, datetime) and effect.created_at == expected.created_at
    assert recorded_state(make_task("alice").pk) == ([], [], [])
