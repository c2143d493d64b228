"""No unknown outcome is dropped (issue 20, point 1): every verb that ends or abandons a task
turns each effect still ``intended`` into ``unknown``, audited, in the operators' queue and the
backlog metric; reconciling it then records what really happened and changes nothing else."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from audit.record import Actor
from mcptasks import access, lifecycle, runner, sweeps
from mcptasks.lifecycle import TRANSITIONS
from mcptasks.models import TERMINAL_STATES, Effect, EffectState, InputRequest, Task, TaskState
from tests.effects.endings import backlog

S = TaskState
WORKER = "test-worker"
STEP = "charge"

pytestmark = pytest.mark.django_db


def _intend(task: Task, step: str = STEP, idempotent: bool = False) -> None:
    lifecycle.task_effect_intended(
        task_id=task.pk,
        attempt=task.attempt,
        step=step,
        idempotency_key=f"{task.pk}:{step}",
        idempotent=idempotent,
    )


def _lease_ran_out(task: Task) -> None:
    """Test set-up: the running attempt's worker died a minute ago (its lease ran out)."""
    Task.objects.filter(pk=task.pk).update(lease_expires_at=timezone.now() - timedelta(minutes=1))


# ---------------------------------------------------------------- the ending paths
# Each one: bring a task with an effect left ``intended`` by a dead (or, for force cancel, a
# live) attempt to its end through the verb a real path calls, and return the state it ends in.


def cancel_of_a_requeued_task(task: Task, actors: dict[str, Actor]) -> str:
    """tasks/cancel of a running task whose worker died: the reaper re-queues it and cancels."""
    lifecycle.task_request_cancel(task_id=task.pk, actor=actors["alice"], reason="stop")
    _lease_ran_out(task)
    assert sweeps.reap_leases() == 1
    return S.CANCELLED


def cancel_of_a_suspended_task(task: Task, actors: dict[str, Actor]) -> str:
    """The reaper re-queued it first (no cancel yet); tasks/cancel then ends the queued task."""
    _lease_ran_out(task)
    lifecycle.task_requeue(task_id=task.pk)
    lifecycle.task_request_cancel(task_id=task.pk, actor=actors["alice"], reason="stop")
    return S.CANCELLED


def attempt_limit(task: Task, actors: dict[str, Actor], settings: Any) -> str:
    """The worker keeps dying: the next claim is past MCPTASKS_MAX_ATTEMPTS and fails at once,
    before any replay could find the effect."""
    settings.MCPTASKS_MAX_ATTEMPTS = 1
    _lease_ran_out(task)
    lifecycle.task_requeue(task_id=task.pk)
    assert runner.run_task(task.pk, worker=WORKER) == S.FAILED
    return S.FAILED


def ttl_expiry(task: Task, actors: dict[str, Actor]) -> str:
    _lease_ran_out(task)
    Task.objects.filter(pk=task.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert sweeps.expire_tasks() == 1
    return S.FAILED


def input_timeout(task: Task, actors: dict[str, Actor]) -> str:
    """A question asked inside the effect's call, never answered: the input wait fails it."""
    lifecycle.task_request_input(
        task_id=task.pk,
        attempt=task.attempt,
        requests=[
            lifecycle.InputSpec(
                key="q",
                method="elicitation/create",
                params={"message": "q"},
                deadline_at=timezone.now() - timedelta(seconds=1),
            )
        ],
    )
    assert sweeps.timeout_inputs() == 1
    return S.FAILED


def force_cancel(task: Task, actors: dict[str, Actor]) -> str:
    """An operator ends it while its attempt is still in the downstream call."""
    lifecycle.task_force_cancel(task_id=task.pk, actor=actors["olga"], reason="runaway")
    return S.CANCELLED


def operator_fail(task: Task, actors: dict[str, Actor]) -> str:
    _lease_ran_out(task)
    lifecycle.task_fail(
        task_id=task.pk, actor=actors["olga"], error=lifecycle.error_object("given up")
    )
    return S.FAILED


def reconcile_fail(task: Task, actors: dict[str, Actor]) -> str:
    """The operator fails a task waiting in needs_reconciliation for another step."""
    lifecycle.task_effect_intended(
        task_id=task.pk,
        attempt=task.attempt,
        step="other",
        idempotency_key=f"{task.pk}:other",
        idempotent=False,
    )
    lifecycle.task_mark_effect_unknown(task_id=task.pk, attempt=task.attempt, step="other")
    other = Effect.objects.get(task_id=task.pk, step="other")
    # That turned every intended effect unknown ("replay"). Set-up: leave ours intended again,
    # as a second effect running beside the first would be (a tool calling from threads).
    Effect.objects.filter(task_id=task.pk, step=STEP).update(state=EffectState.INTENDED)
    lifecycle.task_reconcile_effect(
        effect_id=other.pk, actor=actors["olga"], decision="fail", note="no retry"
    )
    return S.FAILED


@dataclass(frozen=True)
class Ending:
    name: str
    verb: str  # the TRANSITIONS verb that ends the task
    cause: str  # recorded on effect.unknown
    run: Callable[..., str]
    by: str  # the audit actor of effect.unknown
    earlier: tuple[str, ...] = ()  # causes of effect.unknown events the set-up recorded
    attempt_alive: bool = False  # the attempt that left it still holds a lease
    # Another's move took the task from the attempt that left the effect (its lease is kept, for
    # "not applied"); False: that attempt let go of the task itself (it asked, and suspended).
    taken: bool = True


ENDINGS = [
    Ending(
        "cancel of a re-queued task", "cancel_now", "cancel", cancel_of_a_requeued_task, "reaper"
    ),
    Ending(
        "cancel of a suspended task", "cancel_now", "cancel", cancel_of_a_suspended_task, "alice"
    ),
    Ending("attempt limit", "fail", "failed", attempt_limit, "worker"),
    Ending("TTL expiry", "expire", "expired", ttl_expiry, "sweeper"),
    Ending(
        "input timeout", "timeout_input", "input_timeout", input_timeout, "sweeper", taken=False
    ),
    Ending(
        "force cancel", "force_cancel", "force_cancel", force_cancel, "olga", attempt_alive=True
    ),
    Ending("operator fail", "fail", "failed", operator_fail, "olga"),
    Ending(
        "fail while reconciling",
        "reconcile_effect",
        "failed",
        reconcile_fail,
        "olga",
        earlier=("replay",),
        taken=False,
    ),
]


def test_every_verb_that_ends_a_task_is_in_the_table() -> None:
    ending_verbs = {
        verb
        for verb, (_, targets) in TRANSITIONS.items()
        if targets & TERMINAL_STATES and verb != "complete"
    }
    # complete is the attempt's own end after every effect of it was confirmed: no effect of
    # a task can be intended then (a replay turns an intended one unknown or runs it again).
    assert ending_verbs == {ending.verb for ending in ENDINGS}


@pytest.mark.parametrize("ending", ENDINGS, ids=lambda e: e.name)
@pytest.mark.parametrize("decision", ["applied", "not_applied"])
def test_an_open_effect_becomes_unknown_at_every_end_and_is_reconciled_truthfully(
    ending: Ending,
    decision: str,
    make_task: Callable[..., Task],
    actors: dict[str, Actor],
    users: dict[str, Any],
    settings: Any,
) -> None:
    settings.MCPTASKS_RECONCILE_MARGIN_S = 0
    task = make_task(tool_name="effect_crash")
    task = lifecycle.task_claim(task_id=task.pk, worker=WORKER)
    _intend(task)
    backlog_before = backlog()

    args = (task, actors, settings) if ending.run is attempt_limit else (task, actors)
    end_state = ending.run(*args)

    row = Task.objects.get(pk=task.pk)
    assert row.state == end_state
    effect = Effect.objects.get(task_id=task.pk, step=STEP)
    assert effect.state == EffectState.UNKNOWN
    assert (effect.holder_lease_expires_at is not None) == ending.taken
    unknown = AuditEvent.objects.filter(task_id=task.pk, action="effect.unknown").order_by("seq")
    events = [e.data for e in unknown if e.data["step"] == STEP]
    assert [(d["cause"], d["attempt"]) for d in events] == [
        (cause, task.attempt) for cause in (*ending.earlier, ending.cause)
    ]
    assert [e.actor_display for e in unknown if e.data["step"] == STEP][-1] == ending.by
    assert access.reconcilable_effects(users["olga"]).filter(pk=effect.pk).exists()
    assert backlog() >= backlog_before + 1
    assert not InputRequest.objects.filter(task_id=task.pk, state="pending").exists()

    # Reconciling records the truth; the ended task stays as it ended.
    before = Task.objects.filter(pk=task.pk).values("state", "result", "error", "attempt").get()
    if ending.attempt_alive and decision == "not_applied":
        # Its attempt may still be in the downstream call until its lease runs out.
        with pytest.raises(lifecycle.AttemptMayBeAlive, match="MCPTASKS_RECONCILE_MARGIN_S"):
            lifecycle.task_reconcile_effect(
                effect_id=effect.pk, actor=actors["olga"], decision=decision, note="too early"
            )
        assert Effect.objects.get(pk=effect.pk).state == EffectState.UNKNOWN
        # Set-up: that lease ran out a minute ago.
        Effect.objects.filter(pk=effect.pk).update(
            holder_lease_expires_at=timezone.now() - timedelta(minutes=1)
        )
    lifecycle.task_reconcile_effect(
        effect_id=effect.pk,
        actor=actors["olga"],
        decision=decision,
        note="checked the downstream",
        external_ref="ch-1" if decision == "applied" else "",
    )
    effect.refresh_from_db()
    assert (
        effect.state
        == {
            "applied": EffectState.RECONCILED_APPLIED,
            "not_applied": EffectState.RECONCILED_NOT_APPLIED,
        }[decision]
    )
    assert effect.external_ref == ("ch-1" if decision == "applied" else "")
    assert Task.objects.filter(pk=task.pk).values(*before).get() == before
    assert not access.reconcilable_effects(users["olga"]).filter(pk=effect.pk).exists()


def test_purge_keeps_a_task_whose_effect_is_undecided_until_it_is_reconciled(
    make_task: Callable[..., Task], actors: dict[str, Actor], settings: Any
) -> None:
    settings.MCPTASKS_TERMINAL_GRACE_S = 0
    settings.MCPTASKS_RECONCILE_MARGIN_S = 0
    task = make_task(tool_name="effect_crash")
    task = lifecycle.task_claim(task_id=task.pk, worker=WORKER)
    _intend(task)
    lifecycle.task_force_cancel(task_id=task.pk, actor=actors["olga"], reason="stop")
    # Set-up: an effect left intended on a terminal task (recorded before the rule existed).
    Effect.objects.filter(task_id=task.pk).update(state=EffectState.INTENDED)
    Task.objects.filter(pk=task.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    assert lifecycle.task_purge(task_id=task.pk) is False
    effect = Effect.objects.get(task_id=task.pk)
    assert effect.state == EffectState.UNKNOWN
    assert AuditEvent.objects.filter(
        task_id=task.pk, action="effect.unknown", data__cause="purge"
    ).exists()
    assert sweeps.purge_tasks() == 0  # not a candidate while it waits for an operator
    assert Task.objects.filter(pk=task.pk).exists()

    lifecycle.task_reconcile_effect(
        effect_id=effect.pk,
        actor=actors["olga"],
        decision="applied",
        note="found it",
        external_ref="ch-9",
    )
    assert sweeps.purge_tasks() == 1
    assert not Task.objects.filter(pk=task.pk).exists()


def test_an_idempotent_effect_left_intended_by_a_requeued_attempt_is_run_again_not_dropped(
    make_task: Callable[..., Task],
) -> None:
    """Re-queueing abandons nothing: the replay decides (an idempotent effect runs again)."""
    task = make_task(tool_name="effect_crash", arguments={"idempotent": True})
    task = lifecycle.task_claim(task_id=task.pk, worker=WORKER)
    _intend(task, idempotent=True)
    _lease_ran_out(task)
    lifecycle.task_requeue(task_id=task.pk)
    effect = Effect.objects.get(task_id=task.pk)
    assert effect.state == EffectState.INTENDED
    assert effect.holder_lease_expires_at is not None  # when the dead attempt's lease ran out
