"""REST renders lifecycle's cancel outcome: 409 naming the final state for a task that ended."""

from __future__ import annotations

from typing import Any

import pytest

from audit.models import AuditEvent
from mcptasks.models import TaskState as S
from tests.api.conftest import problem

TASKS = "/api/v1/tasks"

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("state", [S.COMPLETED, S.FAILED, S.CANCELLED])
def test_rest_cancel_of_an_ended_task_is_a_409_naming_its_state_and_audits_nothing(
    api: Any, task_in: Any, state: str
) -> None:
    task = task_in(state)
    audited = AuditEvent.objects.count()
    body = problem(api("alice").post(f"{TASKS}/{task.pk}/cancel", {"reason": "late"}), 409)
    assert f"({state})" in body["detail"]
    assert AuditEvent.objects.count() == audited
