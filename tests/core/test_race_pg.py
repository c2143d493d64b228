"""A worker finishing and an operator force-cancelling at the same instant: exactly one wins."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from django.db import connection

from audit.models import AuditEvent
from mcptasks import lifecycle
from mcptasks.models import Task, TaskState

pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]

ITERATIONS = 100
OUTCOME = {
    "complete": (TaskState.COMPLETED, "task.completed"),
    "force_cancel": (TaskState.CANCELLED, "task.force_cancelled"),
}


def _race(contenders: dict[str, Callable[[], Any]]) -> dict[str, BaseException | None]:
    """Start every contender at the same instant on its own connection; return how each
    ended (None for success, else the exception)."""
    barrier = threading.Barrier(len(contenders))
    outcomes: dict[str, BaseException | None] = {}

    def run(name: str, call: Callable[[], Any]) -> None:
        try:
            connection.ensure_connection()  # connect before the start line, not after it
            barrier.wait(timeout=10)
            call()
            outcomes[name] = None
        except BaseException as exc:
            outcomes[name] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=item) for item in contenders.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    return outcomes


def test_complete_and_force_cancel_race_has_exactly_one_winner(task_in, actors):
    assert connection.vendor == "postgresql"
    wins = {"complete": 0, "force_cancel": 0}
    for _ in range(ITERATIONS):
        task = task_in(TaskState.RUNNING)

        outcomes = _race(
            {
                "complete": lambda task=task: lifecycle.task_complete(
                    task_id=task.pk, attempt=task.attempt, result={"content": []}
                ),
                "force_cancel": lambda task=task: lifecycle.task_force_cancel(
                    task_id=task.pk, actor=actors["olga"], reason="race"
                ),
            }
        )

        winners = [name for name, error in outcomes.items() if error is None]
        assert len(winners) == 1, outcomes
        (winner,) = winners
        (loser,) = set(outcomes) - {winner}
        assert isinstance(outcomes[loser], lifecycle.LifecycleError), outcomes[loser]
        state, action = OUTCOME[winner]
        assert Task.objects.get(pk=task.pk).state == state
        finals = list(
            AuditEvent.objects.filter(
                task_id=task.pk, action__in=[a for _, a in OUTCOME.values()]
            ).values_list("action", flat=True)
        )
        assert finals == [action]
        wins[winner] += 1
    assert sum(wins.values()) == ITERATIONS


def test_racing_writers_of_one_tenant_keep_its_audit_chain_gap_free(task_in, actors):
    """Transitions of different tasks of one tenant, all at once: each event takes the next
    sequence number and links to the one before it."""
    tasks = [task_in(TaskState.RUNNING) for _ in range(8)]

    def finish(task: Task, index: int) -> Task:
        if index % 2:
            return lifecycle.task_complete(
                task_id=task.pk, attempt=task.attempt, result={"content": []}
            )
        return lifecycle.task_force_cancel(task_id=task.pk, actor=actors["olga"], reason="race")

    outcomes = _race({task.pk: partial(finish, task, index) for index, task in enumerate(tasks)})

    assert all(error is None for error in outcomes.values()), outcomes
    events = list(
        AuditEvent.objects.filter(chain="tenant:acme")
        .order_by("seq")
        .values_list("seq", "prev_hash", "hash")
    )
    assert [seq for seq, _, _ in events] == list(range(1, len(events) + 1))
    assert all(prev == earlier[2] for earlier, (_, prev, _) in itertools.pairwise(events))
    assert AuditEvent.objects.filter(
        task_id__in=[t.pk for t in tasks], action__in=["task.completed", "task.force_cancelled"]
    ).count() == len(tasks)
