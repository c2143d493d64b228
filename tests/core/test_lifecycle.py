"""The task lifecycle: every legal move through its verb, every refusal changing nothing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.db import transaction
from django.utils import timezone

from audit.models import AuditEvent, ChainHead
from audit.record import Actor
from mcptasks import lifecycle
from mcptasks.lifecycle import (
    LEGAL_MOVES,
    TRANSITIONS,
    EffectNotUnknown,
    InputNotPending,
    InputSpec,
    InvalidTransition,
    StaleAttempt,
)
from mcptasks.models import (
    Audience,
    Effect,
    EffectState,
    InputRequest,
    InputState,
    Task,
    TaskState,
)

S = TaskState
WORKER = "test-worker"
ACCEPT = {"action": "accept", "content": {"ok": True}}
ACTIVE = (
    S.QUEUED,
    S.RUNNING,
    S.SLEEPING,
    S.AWAITING_INPUT,
    S.AWAITING_OPERATOR,
    S.NEEDS_RECONCILIATION,
)
SUSPENDED = (S.QUEUED, S.SLEEPING, S.AWAITING_INPUT, S.AWAITING_OPERATOR, S.NEEDS_RECONCILIATION)
TERMINAL = (S.COMPLETED, S.FAILED, S.CANCELLED)

pytestmark = pytest.mark.django_db


@dataclass
class Env:
    """What a table row's steps may use besides the task."""

    actors: dict[str, Actor]


Step = Callable[[Task, Env], Any]


def ask(*pairs: tuple[str, str]) -> list[InputSpec]:
    return [
        InputSpec(key=key, method="elicitation/create", params={"message": key}, audience=audience)
        for key, audience in pairs
    ]


def reload(task: Task) -> Task:
    return Task.objects.select_related("tenant").get(pk=task.pk)


def in_the_past(*fields: str) -> Step:
    """Move the named timestamps of the task a minute into the past (lease ran out, timer due,
    TTL reached)."""

    def prepare(task: Task, env: Env) -> None:
        past = timezone.now() - timedelta(minutes=1)
        Task.objects.filter(pk=task.pk).update(**dict.fromkeys(fields, past))

    return prepare


def deadline_passed(task: Task, env: Env) -> None:
    InputRequest.objects.filter(task_id=task.pk).update(
        deadline_at=timezone.now() - timedelta(minutes=1)
    )


def effect_in_flight(task: Task, env: Env) -> None:
    lifecycle.task_effect_intended(
        task_id=task.pk,
        attempt=task.attempt,
        step="deploy",
        idempotency_key=f"{task.pk}:deploy",
        idempotent=False,
    )


def cancel_intent(task: Task, env: Env) -> None:
    lifecycle.task_request_cancel(task_id=task.pk, actor=env.actors["alice"])


def answer(key: str, who: str = "alice") -> Step:
    return lambda task, env: lifecycle.task_answer_input(
        task_id=task.pk, key=key, response=ACCEPT, actor=env.actors[who], via="mcp"
    )


def reconcile(decision: str) -> Step:
    def act(task: Task, env: Env) -> Task:
        effect = Effect.objects.get(task_id=task.pk, step="deploy")
        return lifecycle.task_reconcile_effect(
            effect_id=effect.pk,
            actor=env.actors["olga"],
            decision=decision,
            note="checked the cluster",
            external_ref="deploy-42",
        )

    return act


def timeout(key: str, fail: bool) -> Step:
    return lambda task, env: lifecycle.task_timeout_input(task_id=task.pk, key=key, fail=fail)


def extra_client_request(task: Task, env: Env) -> None:
    # No verb sequence leaves a client request pending on a task that waits for an operator
    # (request_input picks awaiting_input then); TRANSITIONS still allows the move, so check the
    # verb derives the state from what stays pending if such rows ever exist.
    InputRequest.objects.create(
        task=task,
        tenant_id=task.tenant_id,
        principal_id=task.principal_id,
        key="late",
        method="elicitation/create",
        params={},
        audience=Audience.CLIENT,
    )


def claim(task: Task, env: Env) -> Task:
    return lifecycle.task_claim(task_id=task.pk, worker=WORKER)


def requeue(task: Task, env: Env) -> Task:
    return lifecycle.task_requeue(task_id=task.pk)


def report(task: Task, env: Env) -> Task:
    return lifecycle.task_report(task_id=task.pk, attempt=task.attempt, message="half way")


def request_input(*pairs: tuple[str, str]) -> Step:
    return lambda task, env: lifecycle.task_request_input(
        task_id=task.pk, attempt=task.attempt, requests=ask(*pairs)
    )


def sleep(task: Task, env: Env) -> Task:
    return lifecycle.task_sleep(
        task_id=task.pk, attempt=task.attempt, wake_at=timezone.now() + timedelta(minutes=5)
    )


def wake(task: Task, env: Env) -> Task:
    return lifecycle.task_wake(task_id=task.pk)


def request_cancel(task: Task, env: Env) -> Task:
    return lifecycle.task_request_cancel(
        task_id=task.pk, actor=env.actors["alice"], reason="not needed"
    ).task


def cancel_now_running(task: Task, env: Env) -> Task:
    return lifecycle.task_cancel_now(
        task_id=task.pk, attempt=task.attempt, actor=Actor.system("worker")
    )


def force_cancel(task: Task, env: Env) -> Task:
    return lifecycle.task_force_cancel(task_id=task.pk, actor=env.actors["olga"], reason="runaway")


def complete(task: Task, env: Env) -> Task:
    return lifecycle.task_complete(
        task_id=task.pk, attempt=task.attempt, result={"content": [{"type": "text", "text": "ok"}]}
    )


def fail(task: Task, env: Env) -> Task:
    return lifecycle.task_fail(
        task_id=task.pk, actor=env.actors["olga"], error=lifecycle.error_object("operator gave up")
    )


def fail_attempt(task: Task, env: Env) -> Task:
    return lifecycle.task_fail(
        task_id=task.pk,
        attempt=task.attempt,
        actor=Actor.system("worker"),
        error=lifecycle.error_object("tool crashed"),
    )


def mark_effect_unknown(task: Task, env: Env) -> Task:
    return lifecycle.task_mark_effect_unknown(task_id=task.pk, attempt=task.attempt, step="deploy")


def expire(task: Task, env: Env) -> Task:
    return lifecycle.task_expire(task_id=task.pk)


# ---------------------------------------------------------------- every legal move
@dataclass(frozen=True)
class Move:
    verb: str
    source: str
    target: str
    act: Step
    audit: tuple[str, ...]
    requests: tuple[tuple[str, str], ...] | None = None
    prepare: Step | None = None
    label: str = ""

    @property
    def id(self) -> str:
        return f"{self.verb}:{self.source}->{self.target}" + (
            f"[{self.label}]" if self.label else ""
        )


CLIENT, OPERATOR = Audience.CLIENT.value, Audience.OPERATOR.value

LEGAL: list[Move] = [
    Move("claim", S.QUEUED, S.RUNNING, claim, ("task.started",)),
    Move(
        "requeue",
        S.RUNNING,
        S.QUEUED,
        requeue,
        ("task.requeued",),
        prepare=in_the_past("lease_expires_at"),
    ),
    Move("report", S.RUNNING, S.RUNNING, report, ()),
    Move(
        "request_input",
        S.RUNNING,
        S.AWAITING_INPUT,
        request_input(("q", CLIENT)),
        ("task.input_requested",),
    ),
    Move(
        "request_input",
        S.RUNNING,
        S.AWAITING_OPERATOR,
        request_input(("ok", OPERATOR)),
        ("task.input_requested",),
    ),
    Move(
        "answer_input",
        S.AWAITING_INPUT,
        S.AWAITING_INPUT,
        answer("a"),
        ("task.input_answered",),
        requests=(("a", CLIENT), ("b", CLIENT)),
    ),
    Move(
        "answer_input",
        S.AWAITING_INPUT,
        S.AWAITING_OPERATOR,
        answer("a"),
        ("task.input_answered",),
        requests=(("a", CLIENT), ("ok", OPERATOR)),
    ),
    Move("answer_input", S.AWAITING_INPUT, S.QUEUED, answer("q"), ("task.input_answered",)),
    Move(
        "answer_input",
        S.AWAITING_OPERATOR,
        S.AWAITING_OPERATOR,
        answer("x", "olga"),
        ("task.input_answered",),
        requests=(("x", OPERATOR), ("y", OPERATOR)),
    ),
    Move(
        "answer_input",
        S.AWAITING_OPERATOR,
        S.AWAITING_INPUT,
        answer("approve", "olga"),
        ("task.input_answered",),
        prepare=extra_client_request,
    ),
    Move(
        "answer_input",
        S.AWAITING_OPERATOR,
        S.QUEUED,
        answer("approve", "olga"),
        ("task.input_answered",),
    ),
    Move("sleep", S.RUNNING, S.SLEEPING, sleep, ("task.sleeping",)),
    Move("wake", S.SLEEPING, S.QUEUED, wake, ("task.woken",), prepare=in_the_past("wake_at")),
    # A suspended task is cancelled at once by the cancel request, through cancel_now.
    *[
        Move(
            "cancel_now",
            source,
            S.CANCELLED,
            request_cancel,
            ("task.cancel_requested", "task.cancelled"),
            label="request_cancel",
        )
        for source in SUSPENDED
    ],
    Move(
        "cancel_now",
        S.RUNNING,
        S.CANCELLED,
        cancel_now_running,
        ("task.cancelled",),
        prepare=cancel_intent,
        label="at a safe point",
    ),
    *[
        Move("force_cancel", source, S.CANCELLED, force_cancel, ("task.force_cancelled",))
        for source in ACTIVE
    ],
    Move("complete", S.RUNNING, S.COMPLETED, complete, ("task.completed",)),
    *[Move("fail", source, S.FAILED, fail, ("task.failed",)) for source in ACTIVE],
    Move("fail", S.RUNNING, S.FAILED, fail_attempt, ("task.failed",), label="by the attempt"),
    Move(
        "mark_effect_unknown",
        S.RUNNING,
        S.NEEDS_RECONCILIATION,
        mark_effect_unknown,
        ("effect.unknown",),
        prepare=effect_in_flight,
    ),
    Move(
        "reconcile_effect",
        S.NEEDS_RECONCILIATION,
        S.QUEUED,
        reconcile("applied"),
        ("effect.reconciled",),
        label="applied",
    ),
    Move(
        "reconcile_effect",
        S.NEEDS_RECONCILIATION,
        S.QUEUED,
        reconcile("not_applied"),
        ("effect.reconciled",),
        label="not_applied",
    ),
    Move(
        "reconcile_effect",
        S.NEEDS_RECONCILIATION,
        S.FAILED,
        reconcile("fail"),
        ("effect.reconciled",),
        label="fail",
    ),
    *[
        Move(
            "expire", source, S.FAILED, expire, ("task.expired",), prepare=in_the_past("expires_at")
        )
        for source in ACTIVE
    ],
    Move(
        "timeout_input",
        S.AWAITING_INPUT,
        S.FAILED,
        timeout("q", fail=True),
        ("task.input_timed_out",),
        prepare=deadline_passed,
    ),
    Move(
        "timeout_input",
        S.AWAITING_INPUT,
        S.QUEUED,
        timeout("q", fail=False),
        ("task.input_timed_out",),
        prepare=deadline_passed,
    ),
    Move(
        "timeout_input",
        S.AWAITING_OPERATOR,
        S.FAILED,
        timeout("approve", fail=True),
        ("task.input_timed_out",),
        prepare=deadline_passed,
    ),
    Move(
        "timeout_input",
        S.AWAITING_OPERATOR,
        S.QUEUED,
        timeout("approve", fail=False),
        ("task.input_timed_out",),
        prepare=deadline_passed,
    ),
    # A timed-out answer handed to the tool waits while other requests are still pending.
    Move(
        "timeout_input",
        S.AWAITING_INPUT,
        S.AWAITING_INPUT,
        timeout("a", fail=False),
        ("task.input_timed_out",),
        requests=(("a", CLIENT), ("b", CLIENT)),
        prepare=deadline_passed,
    ),
    Move(
        "timeout_input",
        S.AWAITING_INPUT,
        S.AWAITING_OPERATOR,
        timeout("a", fail=False),
        ("task.input_timed_out",),
        requests=(("a", CLIENT), ("ok", OPERATOR)),
        prepare=deadline_passed,
    ),
    Move(
        "timeout_input",
        S.AWAITING_OPERATOR,
        S.AWAITING_OPERATOR,
        timeout("x", fail=False),
        ("task.input_timed_out",),
        requests=(("x", OPERATOR), ("y", OPERATOR)),
        prepare=deadline_passed,
    ),
    Move(
        "timeout_input",
        S.AWAITING_OPERATOR,
        S.AWAITING_INPUT,
        timeout("approve", fail=False),
        ("task.input_timed_out",),
        prepare=lambda task, env: (extra_client_request(task, env), deadline_passed(task, env)),
    ),
]


def test_the_move_table_covers_every_legal_transition():
    covered = {(m.verb, m.source, m.target) for m in LEGAL}
    declared = {
        (verb, source, target)
        for verb, (sources, targets) in TRANSITIONS.items()
        for source in sources
        for target in targets
    }
    assert covered == declared
    assert {(source, target) for _, source, target in covered} == LEGAL_MOVES


@pytest.mark.parametrize("move", LEGAL, ids=lambda m: m.id)
def test_legal_move_through_its_verb(move, task_in, actors, audit_actions):
    requests = ask(*move.requests) if move.requests else None
    task = task_in(move.source, requests=requests)
    env = Env(actors)
    if move.prepare:
        move.prepare(task, env)
    task = reload(task)
    assert task.state == move.source
    before_version, before_audit = task.version, audit_actions(task.pk)

    returned = move.act(task, env)

    stored = reload(task)
    assert returned.state == stored.state == move.target
    assert stored.version == before_version + 1
    assert audit_actions(task.pk)[len(before_audit) :] == list(move.audit)
    if move.target in TERMINAL:
        assert stored.lease_owner == "" and stored.lease_expires_at is None


# ---------------------------------------------------------------- every refusal
@dataclass(frozen=True)
class Refusal:
    verb: str
    source: str
    act: Step
    error: type[Exception]
    requests: tuple[tuple[str, str], ...] | None = None
    prepare: Step | None = None
    label: str = ""
    start: str | None = None  # the state to create the task in, when prepare moves it on

    @property
    def id(self) -> str:
        return f"{self.verb}:{self.source}" + (f"[{self.label}]" if self.label else "")


def stale(step: Step) -> Step:
    """Run ``step`` as the attempt before the current one."""

    def act(task: Task, env: Env) -> Any:
        task.attempt -= 1
        return step(task, env)

    return act


def reclaimed(task: Task, env: Env) -> None:
    """The worker of attempt 1 lost its lease; attempt 2 now holds the task."""
    Task.objects.filter(pk=task.pk).update(lease_expires_at=timezone.now() - timedelta(minutes=1))
    lifecycle.task_requeue(task_id=task.pk)
    lifecycle.task_claim(task_id=task.pk, worker="another-worker")


def then(*steps: Step) -> Step:
    def run(task: Task, env: Env) -> None:
        for step in steps:
            step(reload(task), env)

    return run


IT, INP, ENU = InvalidTransition, InputNotPending, EffectNotUnknown

ILLEGAL: list[Refusal] = [
    *[
        Refusal("claim", source, claim, IT)
        for source in (S.RUNNING, S.SLEEPING, S.AWAITING_INPUT, S.COMPLETED, S.CANCELLED)
    ],
    *[Refusal("requeue", source, requeue, IT) for source in (S.QUEUED, S.SLEEPING, S.COMPLETED)],
    Refusal("requeue", S.RUNNING, requeue, IT, label="lease still live"),
    *[Refusal("report", source, report, IT) for source in (S.QUEUED, S.SLEEPING, S.COMPLETED)],
    *[
        Refusal("request_input", source, request_input(("q2", CLIENT)), IT)
        for source in (S.QUEUED, S.AWAITING_INPUT, S.COMPLETED)
    ],
    *[
        Refusal("answer_input", source, answer("q"), IT)
        for source in (S.QUEUED, S.RUNNING, S.SLEEPING, S.COMPLETED, S.CANCELLED)
    ],
    Refusal("answer_input", S.AWAITING_INPUT, answer("nope"), INP, label="unknown key"),
    Refusal(
        "answer_input",
        S.AWAITING_INPUT,
        answer("a"),
        INP,
        label="answered twice",
        requests=(("a", CLIENT), ("b", CLIENT)),
        prepare=answer("a"),
    ),
    Refusal("answer_input", S.AWAITING_OPERATOR, answer("q", "olga"), INP, label="key not asked"),
    *[
        Refusal("sleep", source, sleep, IT)
        for source in (S.QUEUED, S.AWAITING_INPUT, S.SLEEPING, S.COMPLETED)
    ],
    *[Refusal("wake", source, wake, IT) for source in (S.QUEUED, S.RUNNING, S.COMPLETED)],
    Refusal("wake", S.SLEEPING, wake, IT, label="timer not due"),
    *[
        Refusal("cancel_now", source, cancel_now_running, IT, prepare=cancel_intent)
        for source in (S.COMPLETED, S.FAILED, S.CANCELLED)
    ],
    Refusal(
        "cancel_now",
        S.QUEUED,
        lambda task, env: lifecycle.task_cancel_now(task_id=task.pk, actor=env.actors["alice"]),
        IT,
        label="no intent",
    ),
    Refusal("cancel_now", S.RUNNING, cancel_now_running, IT, label="no intent"),
    Refusal(
        "cancel_now",
        S.RUNNING,
        lambda task, env: lifecycle.task_cancel_now(task_id=task.pk, actor=env.actors["alice"]),
        IT,
        prepare=cancel_intent,
        label="running without its attempt",
    ),
    *[Refusal("force_cancel", source, force_cancel, IT) for source in TERMINAL],
    *[Refusal("complete", source, complete, IT) for source in (*SUSPENDED, *TERMINAL)],
    *[Refusal("fail", source, fail, IT) for source in TERMINAL],
    *[
        Refusal("fail", source, fail_attempt, IT, label="by the attempt")
        for source in (S.SLEEPING, S.AWAITING_INPUT, S.COMPLETED)
    ],
    *[
        Refusal("mark_effect_unknown", source, mark_effect_unknown, IT)
        for source in (S.QUEUED, S.SLEEPING, S.NEEDS_RECONCILIATION, S.COMPLETED)
    ],
    Refusal("mark_effect_unknown", S.CANCELLED, mark_effect_unknown, IT),
    Refusal(
        "reconcile_effect",
        S.RUNNING,
        reconcile("applied"),
        ENU,
        label="effect applied",
        prepare=then(
            effect_in_flight,
            lambda task, env: lifecycle.task_effect_applied(
                task_id=task.pk, attempt=task.attempt, step="deploy", result={"ok": True}
            ),
        ),
    ),
    Refusal(
        "reconcile_effect",
        S.RUNNING,
        reconcile("applied"),
        ENU,
        label="effect in flight",
        prepare=effect_in_flight,
    ),
    Refusal(
        "reconcile_effect",
        S.QUEUED,
        reconcile("fail"),
        ENU,
        label="already decided",
        start=S.NEEDS_RECONCILIATION,
        prepare=reconcile("not_applied"),
    ),
    *[
        Refusal("expire", source, expire, IT, prepare=in_the_past("expires_at"))
        for source in TERMINAL
    ],
    Refusal("expire", S.QUEUED, expire, IT, label="ttl not reached"),
    *[
        Refusal("timeout_input", source, timeout("q", fail=True), INP)
        for source in (S.RUNNING, S.COMPLETED)
    ],
    Refusal(
        "timeout_input",
        S.AWAITING_INPUT,
        timeout("q", fail=True),
        INP,
        label="deadline not reached",
    ),
    Refusal(
        "timeout_input",
        S.AWAITING_INPUT,
        timeout("q", fail=True),
        INP,
        label="answered",
        requests=(("q", CLIENT), ("r", CLIENT)),
        prepare=then(answer("q"), deadline_passed),
    ),
    # Fencing: attempt 2 holds the task; every write of attempt 1 is refused.
    Refusal(
        "complete",
        S.RUNNING,
        stale(complete),
        StaleAttempt,
        prepare=reclaimed,
        label="stale attempt",
    ),
    Refusal(
        "report", S.RUNNING, stale(report), StaleAttempt, prepare=reclaimed, label="stale attempt"
    ),
    Refusal(
        "sleep", S.RUNNING, stale(sleep), StaleAttempt, prepare=reclaimed, label="stale attempt"
    ),
    Refusal(
        "request_input",
        S.RUNNING,
        stale(request_input(("q2", CLIENT))),
        StaleAttempt,
        prepare=reclaimed,
        label="stale attempt",
    ),
    Refusal(
        "fail",
        S.RUNNING,
        stale(fail_attempt),
        StaleAttempt,
        prepare=reclaimed,
        label="stale attempt",
    ),
    Refusal(
        "mark_effect_unknown",
        S.RUNNING,
        stale(mark_effect_unknown),
        StaleAttempt,
        prepare=then(effect_in_flight, reclaimed),
        label="stale attempt",
    ),
    Refusal(
        "cancel_now",
        S.RUNNING,
        stale(cancel_now_running),
        StaleAttempt,
        prepare=then(reclaimed, cancel_intent),
        label="stale attempt",
    ),
]


@pytest.mark.parametrize("refusal", ILLEGAL, ids=lambda r: r.id)
def test_illegal_move_is_refused_and_changes_nothing(refusal, task_in, actors, snapshot):
    env = Env(actors)
    requests = ask(*refusal.requests) if refusal.requests else None
    task = task_in(refusal.start or refusal.source, requests=requests)
    if refusal.prepare:
        refusal.prepare(task, env)
    task = reload(task)
    assert task.state == refusal.source
    before = snapshot(task.pk)

    with pytest.raises(refusal.error) as raised:
        refusal.act(task, env)

    assert type(raised.value) is refusal.error
    assert snapshot(task.pk) == before


def test_every_verb_has_a_refusal_case():
    assert {r.verb for r in ILLEGAL} == set(TRANSITIONS)


def test_refusal_names_the_verb_and_the_current_state(task_in):
    task = task_in(S.COMPLETED)
    with pytest.raises(InvalidTransition) as raised:
        lifecycle.task_claim(task_id=task.pk, worker=WORKER)
    assert (raised.value.verb, raised.value.state, raised.value.task_id) == (
        "claim",
        S.COMPLETED,
        task.pk,
    )


@pytest.mark.parametrize(
    "verb",
    sorted(
        {
            "claim",
            "requeue",
            "report",
            "request_input",
            "answer_input",
            "sleep",
            "wake",
            "request_cancel",
            "cancel_now",
            "force_cancel",
            "complete",
            "fail",
            "mark_effect_unknown",
            "expire",
        }
    ),
)
def test_unknown_task_id_raises_task_not_found(verb, actors):
    ghost = Task(pk="no-such-task", attempt=1)
    act = {
        "claim": claim,
        "requeue": requeue,
        "report": report,
        "request_input": request_input(("q", CLIENT)),
        "answer_input": answer("q"),
        "sleep": sleep,
        "wake": wake,
        "request_cancel": request_cancel,
        "cancel_now": cancel_now_running,
        "force_cancel": force_cancel,
        "complete": complete,
        "fail": fail,
        "mark_effect_unknown": mark_effect_unknown,
        "expire": expire,
    }[verb]
    with pytest.raises(lifecycle.TaskNotFound):
        act(ghost, Env(actors))


# ---------------------------------------------------------------- claims and leases
def test_claim_takes_a_lease_and_bumps_the_attempt(task_in, audit_actions):
    task = lifecycle.task_claim(task_id=task_in(S.QUEUED).pk, worker=WORKER)
    assert task.state == S.RUNNING
    assert task.attempt == 1
    assert task.lease_owner == WORKER
    assert task.lease_expires_at > timezone.now()
    event = AuditEvent.objects.get(task_id=task.pk, action="task.started")
    assert (event.actor_kind, event.actor_display, event.data["attempt"]) == ("system", WORKER, 1)


def test_expired_lease_is_requeued_and_the_next_claim_fences_the_old_attempt(task_in, expire_lease):
    task = task_in(S.RUNNING)
    expire_lease(task.pk)

    requeued = lifecycle.task_requeue(task_id=task.pk)
    assert (requeued.state, requeued.lease_owner, requeued.lease_expires_at) == (S.QUEUED, "", None)
    second = lifecycle.task_claim(task_id=task.pk, worker="worker-2")
    assert second.attempt == task.attempt + 1

    with pytest.raises(StaleAttempt):
        lifecycle.task_complete(task_id=task.pk, attempt=task.attempt, result={"content": []})
    with pytest.raises(StaleAttempt):
        lifecycle.task_renew_lease(task_id=task.pk, attempt=task.attempt)
    assert reload(task).state == S.RUNNING
    lifecycle.task_complete(task_id=task.pk, attempt=second.attempt, result={"content": []})
    assert reload(task).state == S.COMPLETED


def test_requeue_of_a_live_lease_is_refused(task_in):
    task = task_in(S.RUNNING)
    with pytest.raises(InvalidTransition):
        lifecycle.task_requeue(task_id=task.pk)
    assert reload(task).lease_owner == WORKER


# ---------------------------------------------------------------- input
def test_partial_answer_keeps_the_task_awaiting_input(task_in, actors, audit_actions):
    task = task_in(S.AWAITING_INPUT, requests=ask(("region", CLIENT), ("size", CLIENT)))

    task = lifecycle.task_answer_input(
        task_id=task.pk, key="region", response=ACCEPT, actor=actors["alice"], via="mcp"
    )

    assert task.state == S.AWAITING_INPUT
    states = dict(InputRequest.objects.filter(task_id=task.pk).values_list("key", "state"))
    assert states == {"region": InputState.ANSWERED, "size": InputState.PENDING}
    answered = InputRequest.objects.get(task_id=task.pk, key="region")
    assert (answered.answered_by_id, answered.answered_via, answered.response) == (
        actors["alice"].user_id,
        "mcp",
        ACCEPT,
    )
    event = AuditEvent.objects.get(task_id=task.pk, action="task.input_answered")
    assert (event.actor_id, event.data["key"], event.data["via"]) == (
        str(actors["alice"].user_id),
        "region",
        "mcp",
    )


def test_answering_every_request_queues_the_task(task_in, actors):
    task = task_in(S.AWAITING_INPUT, requests=ask(("region", CLIENT), ("size", CLIENT)))
    for key in ("region", "size"):
        task = lifecycle.task_answer_input(
            task_id=task.pk, key=key, response=ACCEPT, actor=actors["alice"], via="mcp"
        )
    assert task.state == S.QUEUED
    assert task.status_message == "Resuming"
    assert not InputRequest.objects.filter(task_id=task.pk, state=InputState.PENDING).exists()


def test_operator_answer_of_the_last_request_resumes_a_task_awaiting_an_operator(task_in, actors):
    task = task_in(S.AWAITING_OPERATOR)
    assert task.status_message == "Waiting for an operator"
    task = lifecycle.task_answer_input(
        task_id=task.pk, key="approve", response=ACCEPT, actor=actors["olga"], via="dashboard"
    )
    assert task.state == S.QUEUED
    event = AuditEvent.objects.get(task_id=task.pk, action="task.input_answered")
    assert (event.actor_kind, event.data["via"]) == ("operator", "dashboard")


def test_input_timeout_fails_the_task_and_supersedes_the_other_requests(task_in):
    task = task_in(
        S.AWAITING_INPUT,
        requests=[
            InputSpec(
                key="q",
                method="elicitation/create",
                params={},
                deadline_at=timezone.now() + timedelta(minutes=5),
            ),
            InputSpec(key="r", method="elicitation/create", params={}),
        ],
    )

    with time_machine.travel(timezone.now() + timedelta(minutes=6)):
        task = lifecycle.task_timeout_input(task_id=task.pk, key="q")

    assert task.state == S.FAILED
    assert "timed out" in task.error["message"]
    states = dict(InputRequest.objects.filter(task_id=task.pk).values_list("key", "state"))
    assert states == {"q": InputState.EXPIRED, "r": InputState.SUPERSEDED}
    assert AuditEvent.objects.filter(task_id=task.pk, action="task.input_timed_out").count() == 1


def test_input_timeout_without_fail_resumes_the_task(task_in):
    task = task_in(S.AWAITING_OPERATOR)
    deadline_passed(task, Env({}))
    task = lifecycle.task_timeout_input(task_id=task.pk, key="approve", fail=False)
    assert task.state == S.QUEUED
    assert InputRequest.objects.get(task_id=task.pk).state == InputState.EXPIRED


# ---------------------------------------------------------------- timers
def test_sleeping_task_wakes_once_its_timer_is_due(task_in, audit_actions):
    task = task_in(S.RUNNING)
    wake_at = timezone.now() + timedelta(minutes=10)
    task = lifecycle.task_sleep(
        task_id=task.pk, attempt=task.attempt, wake_at=wake_at, message="waiting for the pipeline"
    )
    assert (task.state, task.wake_at, task.lease_owner) == (S.SLEEPING, wake_at, "")
    assert task.status_message == "waiting for the pipeline"

    with pytest.raises(InvalidTransition):
        lifecycle.task_wake(task_id=task.pk)
    with time_machine.travel(wake_at + timedelta(seconds=1)):
        task = lifecycle.task_wake(task_id=task.pk)

    assert (task.state, task.wake_at) == (S.QUEUED, None)
    assert audit_actions(task.pk)[-2:] == ["task.sleeping", "task.woken"]


# ---------------------------------------------------------------- cancel
@pytest.mark.parametrize("source", SUSPENDED)
def test_cancel_of_suspended_task_is_immediate(source, task_in, actors, audit_actions):
    task = task_in(source)

    outcome = lifecycle.task_request_cancel(
        task_id=task.pk, actor=actors["alice"], reason="changed my mind"
    )

    task = outcome.task
    assert (task.state, outcome.result) == (S.CANCELLED, lifecycle.CancelResult.CANCELLED)
    stored = reload(task)
    assert stored.cancel_requested_by_id == actors["alice"].user_id
    assert stored.cancel_reason == "changed my mind"
    assert stored.wake_at is None
    assert not InputRequest.objects.filter(task_id=task.pk, state=InputState.PENDING).exists()
    assert audit_actions(task.pk)[-2:] == ["task.cancel_requested", "task.cancelled"]
    requested = AuditEvent.objects.get(task_id=task.pk, action="task.cancel_requested")
    assert (requested.actor_id, requested.data["reason"]) == (
        str(actors["alice"].user_id),
        "changed my mind",
    )


def test_cancel_of_running_task_records_intent_only(task_in, actors, audit_actions):
    task = task_in(S.RUNNING)
    before = audit_actions(task.pk)

    outcome = lifecycle.task_request_cancel(task_id=task.pk, actor=actors["alice"])

    assert outcome.result == lifecycle.CancelResult.REQUESTED
    stored = reload(task)
    assert stored.state == S.RUNNING
    assert stored.cancel_requested_at is not None
    assert stored.cancel_requested_by_id == actors["alice"].user_id
    assert audit_actions(task.pk) == [*before, "task.cancel_requested"]


def test_running_task_with_cancel_intent_is_cancelled_at_its_next_safe_point(
    task_in, actors, audit_actions
):
    task = task_in(S.RUNNING)
    lifecycle.task_request_cancel(task_id=task.pk, actor=actors["alice"])

    task = lifecycle.task_cancel_now(
        task_id=task.pk, attempt=task.attempt, actor=Actor.system("worker")
    )

    assert (task.state, task.lease_owner) == (S.CANCELLED, "")
    assert audit_actions(task.pk)[-2:] == ["task.cancel_requested", "task.cancelled"]


@pytest.mark.parametrize("suspend", ["sleep", "request_input", "mark_effect_unknown"])
def test_running_task_with_cancel_intent_is_cancelled_when_it_suspends(
    suspend, task_in, actors, audit_actions
):
    task = task_in(S.RUNNING)
    env = Env(actors)
    effect_in_flight(task, env)
    lifecycle.task_request_cancel(task_id=task.pk, actor=actors["alice"])
    step = {
        "sleep": sleep,
        "request_input": request_input(("q", CLIENT)),
        "mark_effect_unknown": mark_effect_unknown,
    }[suspend]

    task = step(reload(task), env)

    assert task.state == S.CANCELLED
    assert audit_actions(task.pk)[-1] == "task.cancelled"
    assert not InputRequest.objects.filter(task_id=task.pk, state=InputState.PENDING).exists()


@pytest.mark.parametrize("source", SUSPENDED)
def test_cancel_now_honours_intent_recorded_on_a_suspended_task(
    source, task_in, actors, audit_actions
):
    task = task_in(source)
    # Intent recorded but not yet honoured (e.g. the process died between the two).
    Task.objects.filter(pk=task.pk).update(
        cancel_requested_at=timezone.now(), cancel_requested_by_id=actors["alice"].user_id
    )

    task = lifecycle.task_cancel_now(task_id=task.pk, actor=actors["alice"])

    assert task.state == S.CANCELLED
    assert audit_actions(task.pk)[-1] == "task.cancelled"


@pytest.mark.parametrize("source", TERMINAL)
def test_cancel_of_terminal_task_is_an_idempotent_noop(
    source, task_in, actors, snapshot, audit_actions
):
    task = task_in(source)
    before, audited = snapshot(task.pk), audit_actions(task.pk)

    first = lifecycle.task_request_cancel(task_id=task.pk, actor=actors["alice"])
    second = lifecycle.task_request_cancel(task_id=task.pk, actor=actors["alice"])

    assert first.task.state == second.task.state == source
    assert first.result == second.result == lifecycle.CancelResult.ALREADY_ENDED
    assert first.ended and f"({source})" in first.ended_reason
    assert snapshot(task.pk) == before
    assert audit_actions(task.pk) == audited  # a no-op cancel records nothing


def test_second_cancel_request_of_a_running_task_is_a_noop(task_in, actors, snapshot):
    task = task_in(S.RUNNING)
    lifecycle.task_request_cancel(task_id=task.pk, actor=actors["alice"], reason="first")
    before = snapshot(task.pk)

    outcome = lifecycle.task_request_cancel(task_id=task.pk, actor=actors["amy"], reason="second")

    assert outcome.result == lifecycle.CancelResult.ALREADY_REQUESTED and not outcome.ended
    task = outcome.task
    assert task.state == S.RUNNING
    assert snapshot(task.pk) == before
    assert reload(task).cancel_reason == "first"


def test_force_cancel_marks_the_effect_in_flight_unknown(task_in, actors, audit_actions):
    task = task_in(S.RUNNING)
    effect_in_flight(task, Env(actors))

    task = lifecycle.task_force_cancel(task_id=task.pk, actor=actors["olga"], reason="runaway")

    assert (task.state, task.lease_owner) == (S.CANCELLED, "")
    assert task.status_message == "Force-cancelled: runaway"
    assert Effect.objects.get(task_id=task.pk, step="deploy").state == EffectState.UNKNOWN
    assert audit_actions(task.pk)[-2:] == ["task.force_cancelled", "effect.unknown"]
    forced = AuditEvent.objects.get(task_id=task.pk, action="task.force_cancelled")
    assert (forced.actor_kind, forced.actor_id, forced.data["reason"]) == (
        "operator",
        str(actors["olga"].user_id),
        "runaway",
    )
    unknown = AuditEvent.objects.get(task_id=task.pk, action="effect.unknown")
    assert unknown.data["step"] == "deploy"


def test_force_cancel_leaves_applied_effects_alone(task_in, actors):
    task = task_in(S.RUNNING)
    effect_in_flight(task, Env(actors))
    lifecycle.task_effect_applied(
        task_id=task.pk, attempt=task.attempt, step="deploy", result={"ok": True}
    )
    lifecycle.task_force_cancel(task_id=task.pk, actor=actors["olga"], reason="runaway")
    assert Effect.objects.get(task_id=task.pk).state == EffectState.APPLIED
    assert not AuditEvent.objects.filter(task_id=task.pk, action="effect.unknown").exists()


def test_force_cancel_needs_a_reason(task_in, actors, snapshot):
    task = task_in(S.RUNNING)
    before = snapshot(task.pk)
    with pytest.raises(ValueError):
        lifecycle.task_force_cancel(task_id=task.pk, actor=actors["olga"], reason="  ")
    assert snapshot(task.pk) == before


# ---------------------------------------------------------------- completion
def test_complete_stores_the_result_and_releases_the_lease(task_in, audit_actions):
    task = task_in(S.RUNNING)
    result = {"content": [{"type": "text", "text": "boom"}], "isError": True}
    task = lifecycle.task_complete(task_id=task.pk, attempt=task.attempt, result=result)
    assert (task.state, task.result, task.lease_owner) == (S.COMPLETED, result, "")
    assert task.status_message == "Completed with a tool error"
    event = AuditEvent.objects.get(task_id=task.pk, action="task.completed")
    assert event.data["is_error"] is True


def test_oversized_result_fails_the_task(task_in, settings):
    settings.MCPTASKS_MAX_RESULT_BYTES = 100
    task = task_in(S.RUNNING)
    task = lifecycle.task_complete(
        task_id=task.pk,
        attempt=task.attempt,
        result={"content": [{"type": "text", "text": "x" * 200}]},
    )
    assert task.state == S.FAILED
    assert "MCPTASKS_MAX_RESULT_BYTES" in task.error["message"]
    assert task.result is None


def test_fail_stores_the_error_and_supersedes_pending_input(task_in, actors):
    task = task_in(S.AWAITING_INPUT)
    error = lifecycle.error_object("operator gave up")
    task = lifecycle.task_fail(task_id=task.pk, actor=actors["olga"], error=error)
    assert (task.state, task.error) == (S.FAILED, error)
    assert InputRequest.objects.get(task_id=task.pk).state == InputState.SUPERSEDED
    event = AuditEvent.objects.get(task_id=task.pk, action="task.failed")
    assert event.data["error"]["code"] == lifecycle.INTERNAL_ERROR


# ---------------------------------------------------------------- reconciliation
def test_reconcile_applied_records_the_external_ref_and_resumes(task_in, actors):
    task = task_in(S.NEEDS_RECONCILIATION)
    effect = Effect.objects.get(task_id=task.pk)

    task = lifecycle.task_reconcile_effect(
        effect_id=effect.pk,
        actor=actors["olga"],
        decision="applied",
        note="saw it live",
        external_ref="deploy-42",
    )

    assert task.state == S.QUEUED
    effect.refresh_from_db()
    assert (effect.state, effect.external_ref, effect.reconciled_by_id) == (
        EffectState.RECONCILED_APPLIED,
        "deploy-42",
        actors["olga"].user_id,
    )
    event = AuditEvent.objects.get(task_id=task.pk, action="effect.reconciled")
    assert (event.data["decision"], event.data["step"], event.data["note"]) == (
        "applied",
        "deploy",
        "saw it live",
    )


def test_reconcile_not_applied_lets_the_step_run_again(task_in, actors):
    task = task_in(S.NEEDS_RECONCILIATION)
    effect = Effect.objects.get(task_id=task.pk)
    task = lifecycle.task_reconcile_effect(
        effect_id=effect.pk, actor=actors["olga"], decision="not_applied", note="nothing there"
    )
    assert task.state == S.QUEUED
    assert Effect.objects.get(pk=effect.pk).state == EffectState.RECONCILED_NOT_APPLIED


def test_reconcile_fail_fails_the_task(task_in, actors):
    task = task_in(S.NEEDS_RECONCILIATION)
    effect = Effect.objects.get(task_id=task.pk)
    task = lifecycle.task_reconcile_effect(
        effect_id=effect.pk, actor=actors["olga"], decision="fail", note="half deployed"
    )
    assert task.state == S.FAILED
    assert "half deployed" in task.error["message"]
    assert Effect.objects.get(pk=effect.pk).state == EffectState.FAILED


def test_second_reconcile_decision_is_refused(task_in, actors, snapshot):
    task = task_in(S.NEEDS_RECONCILIATION)
    effect = Effect.objects.get(task_id=task.pk)
    lifecycle.task_reconcile_effect(
        effect_id=effect.pk,
        actor=actors["olga"],
        decision="applied",
        note="first",
        external_ref="r1",
    )
    before = snapshot(task.pk)

    with pytest.raises(EffectNotUnknown):
        lifecycle.task_reconcile_effect(
            effect_id=effect.pk, actor=actors["olga"], decision="fail", note="second"
        )

    assert snapshot(task.pk) == before


def test_reconcile_on_a_terminal_task_only_records(task_in, actors, audit_actions):
    task = task_in(S.RUNNING)
    effect_in_flight(task, Env(actors))
    task = lifecycle.task_force_cancel(task_id=task.pk, actor=actors["olga"], reason="stuck")
    effect = Effect.objects.get(task_id=task.pk)
    assert effect.state == EffectState.UNKNOWN
    version = reload(task).version

    returned = lifecycle.task_reconcile_effect(
        effect_id=effect.pk,
        actor=actors["olga"],
        decision="applied",
        note="it did deploy",
        external_ref="deploy-7",
    )

    stored = reload(task)
    assert returned.state == stored.state == S.CANCELLED
    assert stored.version == version
    assert Effect.objects.get(pk=effect.pk).state == EffectState.RECONCILED_APPLIED
    assert audit_actions(task.pk)[-1] == "effect.reconciled"
    with pytest.raises(EffectNotUnknown):
        lifecycle.task_reconcile_effect(
            effect_id=effect.pk,
            actor=actors["olga"],
            decision="not_applied",
            note="changed my mind",
        )


def test_task_waits_until_every_unknown_effect_is_reconciled(task_in, actors):
    task = task_in(S.RUNNING)
    for step in ("migrate", "deploy"):
        lifecycle.task_effect_intended(
            task_id=task.pk,
            attempt=task.attempt,
            step=step,
            idempotency_key=f"{task.pk}:{step}",
            idempotent=False,
        )
    # Replay stops at the first unknown effect, so two at once only arise from earlier
    # crashes; set the first one up directly.
    Effect.objects.filter(task_id=task.pk, step="migrate").update(state=EffectState.UNKNOWN)
    task = lifecycle.task_mark_effect_unknown(task_id=task.pk, attempt=task.attempt, step="deploy")
    migrate, deploy = (Effect.objects.get(task_id=task.pk, step=s) for s in ("migrate", "deploy"))

    task = lifecycle.task_reconcile_effect(
        effect_id=migrate.pk, actor=actors["olga"], decision="applied", note="done"
    )
    assert task.state == S.NEEDS_RECONCILIATION
    task = lifecycle.task_reconcile_effect(
        effect_id=deploy.pk, actor=actors["olga"], decision="not_applied", note="not done"
    )
    assert task.state == S.QUEUED


@pytest.mark.parametrize("decision, note", [("maybe", "why"), ("applied", " ")])
def test_reconcile_needs_a_known_decision_and_a_note(decision, note, task_in, actors, snapshot):
    task = task_in(S.NEEDS_RECONCILIATION)
    before = snapshot(task.pk)
    with pytest.raises(ValueError):
        lifecycle.task_reconcile_effect(
            effect_id=Effect.objects.get(task_id=task.pk).pk,
            actor=actors["olga"],
            decision=decision,
            note=note,
        )
    assert snapshot(task.pk) == before


# ---------------------------------------------------------------- expiry and purge
def test_expired_active_task_fails_with_a_clear_error(task_in, audit_actions):
    task = task_in(S.AWAITING_INPUT)
    in_the_past("expires_at")(task, Env({}))
    task = lifecycle.task_expire(task_id=task.pk)
    assert task.state == S.FAILED
    assert "ttlMs" in task.error["message"]
    assert InputRequest.objects.get(task_id=task.pk).state == InputState.SUPERSEDED
    assert audit_actions(task.pk)[-1] == "task.expired"


def test_terminal_task_past_ttl_and_grace_is_purged_but_its_audit_stays(
    task_in, audit_actions, settings
):
    task = task_in(S.COMPLETED)
    grace = timedelta(seconds=settings.MCPTASKS_TERMINAL_GRACE_S)
    Task.objects.filter(pk=task.pk).update(expires_at=timezone.now() - grace - timedelta(minutes=1))
    history = audit_actions(task.pk)

    assert lifecycle.task_purge(task_id=task.pk) is True

    assert not Task.objects.filter(pk=task.pk).exists()
    assert audit_actions(task.pk) == [*history, "task.purged"]


def test_terminal_task_within_its_grace_period_is_not_purged(task_in, snapshot):
    task = task_in(S.FAILED)
    Task.objects.filter(pk=task.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    before = snapshot(task.pk)
    assert lifecycle.task_purge(task_id=task.pk) is False
    assert snapshot(task.pk) == before


@pytest.mark.parametrize("source", ACTIVE)
def test_active_task_is_never_purged(source, task_in, snapshot):
    task = task_in(source)
    Task.objects.filter(pk=task.pk).update(expires_at=timezone.now() - timedelta(days=30))
    before = snapshot(task.pk)
    assert lifecycle.task_purge(task_id=task.pk) is False
    assert snapshot(task.pk) == before


# ---------------------------------------------------------------- audit atomicity
class Boom(Exception):
    pass


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("verb", ["claim", "force_cancel", "request_cancel"])
def test_transition_rolled_back_with_its_transaction_leaves_no_change_and_no_audit(
    verb, task_in, actors, snapshot
):
    task = task_in(S.QUEUED if verb == "claim" else S.RUNNING)
    env = Env(actors)
    if verb == "force_cancel":
        effect_in_flight(task, env)
    before = snapshot(task.pk)
    heads = list(ChainHead.objects.order_by("chain").values())
    act = {"claim": claim, "force_cancel": force_cancel, "request_cancel": request_cancel}[verb]

    with pytest.raises(Boom), transaction.atomic():
        act(reload(task), env)
        assert AuditEvent.objects.count() > before["audit_events"]
        raise Boom

    assert snapshot(task.pk) == before
    assert list(ChainHead.objects.order_by("chain").values()) == heads
