"""Replay execution of tools as durable tasks (DESIGN §4).

Each run claims the task (lease + attempt), calls the tool function from the top with a
:class:`TaskContext` (task_context.py) bound to the task's records — steps already done return
their recorded outcome — and ends by completing, failing or suspending the task through lifecycle.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

import jsonschema
import structlog
from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connection

from audit.record import Actor
from mcptasks import approval_policies, db_retry, failures, lifecycle, tracing
from mcptasks.interrupt import async_raise
from mcptasks.lifecycle import error_object
from mcptasks.lifecycle.execution import claim
from mcptasks.models import (
    GateOutcome,
    InputKind,
    Task,
)
from mcptasks.task_context import MISSING_CAPABILITY, MissingCapability, Stop, TaskContext
from mcptasks.tools.context import (
    NonDeterministicTool,
    Suspend,
    ToolDefinitionError,
    ToolError,
)
from mcptasks.tools.registry import ToolDef, registry
from mcptasks.tools.results import to_call_tool_result

log = logging.getLogger(__name__)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


class Overrun(Stop):
    """Raised in a step still running at the tool's maximum run time (the task was already
    failed or cancelled by the watchdog): stop without writing."""


@dataclass
class _Running:
    """One attempt running in this process, as the renewer thread sees it."""

    renew_at: float  # monotonic
    interval: float
    thread_id: int
    deadline: float | None = None  # monotonic; the tool's maximum run time
    limit_s: float = 0.0
    done: bool = False  # the attempt left run_task's step (set under _INTERRUPT)
    interrupted: bool = False  # Overrun was raised in its thread

    def next_at(self) -> float:
        return self.renew_at if self.deadline is None else min(self.renew_at, self.deadline)


class _LeaseRenewer:
    """One daemon thread per process that renews the lease of every attempt running in it, and
    stops an attempt still running at its tool's maximum run time (the watchdog).

    Starting and joining a thread per attempt cost a no-op task about as much as its own run;
    registering with a thread that already runs costs a dict entry.
    """

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self.changed = threading.Condition()
        self.due: dict[tuple[str, int], _Running] = {}
        self.thread: threading.Thread | None = None
        # When the thread's wait ends (monotonic; inf: it waits for an attempt). An attempt due
        # no sooner needs no wake-up: a no-op task's attempt ended before its first renewal, and
        # waking the thread for each one cost that task a thread switch and the GIL.
        self.wakes_at = math.inf

    def add(self, task_id: str, attempt: int, limit_s: float | None = None) -> _Running:
        interval = max(min(settings.MCPTASKS_LEASE_RENEW_S, settings.MCPTASKS_LEASE_S / 3), 0.5)
        now = time.monotonic()
        running = _Running(now + interval, interval, threading.get_ident())
        if limit_s:
            running.deadline, running.limit_s = now + limit_s, limit_s
        with self.changed:
            self.due[(task_id, attempt)] = running
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(
                    target=self._loop, daemon=True, name="mcptasks-lease-renewer"
                )
                self.thread.start()
            if running.next_at() < self.wakes_at:
                self.changed.notify()
        return running

    def discard(self, task_id: str, attempt: int) -> None:
        with self.changed:
            self.due.pop((task_id, attempt), None)

    def _next_batch(self) -> list[tuple[tuple[str, int], _Running, bool]]:
        """Wait until some leases are due or some attempts overran; return them (leases
        already rescheduled; overrun attempts removed), with whether each overran."""
        with self.changed:
            while True:
                now = time.monotonic()
                ready = []
                for key, running in list(self.due.items()):
                    if running.deadline is not None and running.deadline <= now:
                        del self.due[key]
                        ready.append((key, running, True))
                    elif running.renew_at <= now:
                        running.renew_at = now + running.interval
                        ready.append((key, running, False))
                if ready:
                    self.wakes_at = -math.inf  # busy: it looks at the attempts again after
                    return ready
                soonest = min((r.next_at() for r in self.due.values()), default=math.inf)
                self.wakes_at = soonest
                self.changed.wait(None if soonest == math.inf else soonest - now)

    def _loop(self) -> None:
        while True:
            for (task_id, attempt), running, overran in self._next_batch():
                try:
                    if overran:
                        _stop_overrun(task_id, attempt, running)
                    else:
                        lifecycle.task_renew_lease(task_id=task_id, attempt=attempt)
                except lifecycle.LifecycleError:
                    self.discard(task_id, attempt)  # finished, cancelled or fenced off
                except Exception:
                    log.warning("lease renewal failed", exc_info=True)
            close_old_connections()


def _stop_overrun(task_id: str, attempt: int, running: _Running) -> None:
    """End an attempt past its maximum run time, then interrupt its step.

    The task ends first (failed, or cancelled if a cancel was asked for: a step that ignores
    cancellation is stopped here), so the outcome does not depend on the step giving way; then
    :class:`Overrun` is raised in the step's thread at its next Python instruction. A step
    blocked in a C call that never returns stays blocked, fenced off: every write it tries is
    refused."""
    log.warning(
        "attempt exceeded its maximum run time; stopping it",
        extra={"task_id": task_id, "attempt": attempt, "max_run_s": running.limit_s},
    )
    lifecycle.task_stop_overrun(task_id=task_id, attempt=attempt, limit_s=running.limit_s)
    with _INTERRUPT:
        if not running.done:
            running.interrupted = True
            async_raise(running.thread_id, Overrun)


_INTERRUPT = threading.Lock()


_renewer = _LeaseRenewer()


class LeaseKeeper:
    """Renews the lease of a running attempt in the background while a step runs."""

    def __init__(self, task_id: str, attempt: int, limit_s: float | None = None) -> None:
        self.task_id, self.attempt, self.limit_s = task_id, attempt, limit_s
        self.running: _Running | None = None

    def __enter__(self) -> LeaseKeeper:
        self.running = _renewer.add(self.task_id, self.attempt, self.limit_s)
        return self

    def __exit__(self, *exc: object) -> None:
        _renewer.discard(self.task_id, self.attempt)
        with _INTERRUPT:
            if self.running is not None:
                self.running.done = True
                if self.running.interrupted:
                    async_raise(self.running.thread_id, None)  # not delivered yet: withdraw


def run_task(task_id: str, worker: str | None = None) -> str | None:
    """Claim and run one attempt of a task; return the state it left the task in.

    Returns None when the task could not be claimed (gone, running elsewhere, terminal).
    """
    return run_attempt(task_id, worker)[0]


def run_attempt(task_id: str, worker: str | None = None) -> tuple[str | None, bool]:
    """:func:`run_task`, and whether the attempt's claim left its tenant or principal at a
    running cap (False when it was not claimed)."""
    started_ns = tracing.now_ns()
    name = worker or worker_name()
    try:
        # The worker keeps its connections between tasks (celery.WorkerDatabaseFixup): one the
        # server dropped while idle fails the claim's first statement, a read, and the claim
        # is then made on a fresh connection (once it wrote, it is not repeated).
        claimed = db_retry.run(
            lambda: claim(task_id=task_id, worker=name), safe=False, what=f"claim of {task_id}"
        )
    except lifecycle.LifecycleError:
        return None, False
    task = claimed.task
    with tracing.attempt_span(task, started_ns) as span:  # one span of the task's trace
        state = _run_claimed(task)
        tracing.note_outcome(span, state, lambda: _error_class(task.pk))
    return state, claimed.fills_cap


def _error_class(task_id: str) -> str:
    """The exception class a failed task's diagnosis names (failures.py), for its span."""
    failure = Task.objects.filter(pk=task_id).values_list("failure", flat=True).first()
    return str((failure or {}).get("error_class") or "")


def _run_claimed(task: Task) -> str | None:
    if task.lost_attempts >= settings.MCPTASKS_MAX_ATTEMPTS:
        return _fail(
            task,
            f"Task exceeded the limit of {settings.MCPTASKS_MAX_ATTEMPTS} "
            "attempts (MCPTASKS_MAX_ATTEMPTS); its worker kept dying",
        )
    tool_def = registry.get(task.tool_name)
    if tool_def is None:
        return _fail(task, f"Tool {task.tool_name!r} is no longer available on this server")
    binding_error = _check_binding(task, tool_def)
    if binding_error:
        return _fail(task, binding_error)
    context = TaskContext(task, tool_def)
    try:
        with (
            LeaseKeeper(task.pk, task.attempt, max_run_s(tool_def)),
            context.progress,
            structlog.contextvars.bound_contextvars(
                task_id=task.pk,
                tenant=task.tenant.slug,
                attempt=task.attempt,
                correlation_id=task.correlation_id,
            ),
        ):
            return _execute(task, tool_def, context)
    except Overrun:  # delivered after the step returned, before it could be withdrawn
        return _state_of(task.pk)


def max_run_s(tool_def: ToolDef) -> float | None:
    """How long one attempt of the tool may run: its ``max_run_s``, else MCPTASKS_MAX_RUN_S
    (0: no limit). Enforced here, in the worker, whatever the job's sender asked for."""
    return tool_def.max_run_s or settings.MCPTASKS_MAX_RUN_S or None


def _check_binding(task: Task, tool_def: ToolDef) -> str | None:
    """A task resumed under another build or policy: continue and audit it, or refuse."""
    changes = {}
    if task.server_build != settings.MCPTASKS_SERVER_BUILD:
        changes["server_build"] = [task.server_build, settings.MCPTASKS_SERVER_BUILD]
    # The approval rules part of the binding is compared when a gate is declared (_gate_of).
    if approval_policies.tool_revision_of(task.policy_revision) != tool_def.policy_revision:
        changes["policy_revision"] = [task.policy_revision, tool_def.policy_revision]
    if not changes:
        return None
    if tool_def.on_build_change == "fail":
        return (
            f"Task was created under {task.server_build}/{task.policy_revision} and the tool "
            f"{task.tool_name!r} refuses to resume under a different build or policy"
        )
    lifecycle.task_note_binding_change(task_id=task.pk, attempt=task.attempt, changes=changes)
    return None


def _execute(task: Task, tool_def: ToolDef, context: TaskContext) -> str | None:
    try:
        try:
            value = _call_tool(task, tool_def, context)
        except Exception:
            if context.broken is None:
                raise
            raise context.broken from None  # a broken rule outranks what the tool made of it
        if context.broken is not None:
            raise context.broken
    except Suspend:
        return _state_of(task.pk)
    except lifecycle.LifecycleError as exc:
        log.info("attempt stopped: %s", exc, extra={"task_id": task.pk})
        return _state_of(task.pk)
    except ToolError as exc:
        return _complete(
            task,
            {
                "resultType": "complete",
                "content": [{"type": "text", "text": str(exc)}],
                "isError": True,
            },
            context,
        )
    except MissingCapability as exc:
        return _fail(
            task,
            str(exc),
            code=MISSING_CAPABILITY,
            data={"requiredCapabilities": {exc.capability: {}}},
        )
    except ToolDefinitionError as exc:
        label = "Non-deterministic tool" if isinstance(exc, NonDeterministicTool) else "Tool error"
        return _fail(task, f"{label}: {exc}")
    except (OperationalError, InterfaceError):
        # The database failed under the attempt (a dropped connection), not the tool: failing
        # the task would turn a blip into a lost result. Abandon the attempt instead; its lease
        # runs out and the reaper requeues the task (counted against MCPTASKS_MAX_ATTEMPTS).
        log.warning("attempt abandoned: database error", exc_info=True, extra={"task_id": task.pk})
        return None
    except Exception as exc:
        log.exception("tool raised", extra={"task_id": task.pk, "tool": task.tool_name})
        return _fail(
            task,
            f"Tool {task.tool_name!r} failed with an internal error",
            failure=failures.diagnose(task, context.sequence, exc),
        )
    try:
        result = to_call_tool_result(value, tool_def)
    except (TypeError, ValueError, jsonschema.ValidationError) as exc:
        log.warning("tool result rejected: %s", exc, extra={"task_id": task.pk})
        return _fail(
            task, f"Tool {task.tool_name!r} returned a result that does not match its outputSchema"
        )
    return _complete(task, result, context)


def _call_tool(task: Task, tool_def: ToolDef, context: TaskContext) -> Any:
    try:
        return tool_def.fn(context, **task.arguments)
    finally:
        _end_transaction_left_open(task)


def _end_transaction_left_open(task: Task) -> None:
    """A tool that turned autocommit off and returned with its transaction open: roll that
    transaction back and turn autocommit on again, so the task's end is committed (and its
    on-commit work registered) as always; the attempt fails, saying why. Its uncommitted writes
    were never durable: the same as the worker's closing such a connection after the job."""
    if connection.connection is None or connection.in_atomic_block or connection.get_autocommit():
        return
    log.error(
        "tool left a database transaction open; rolled back",
        extra={"task_id": task.pk, "tool": task.tool_name},
    )
    connection.rollback()
    connection.set_autocommit(True)
    raise ToolDefinitionError(
        "the tool left a database transaction open (autocommit off); its uncommitted writes "
        "were rolled back"
    )


def _state_of(task_id: str) -> str | None:
    return Task.objects.filter(pk=task_id).values_list("state", flat=True).first()


def _complete(task: Task, result: dict[str, Any], context: TaskContext) -> str | None:
    # The attempt read the task's input requests when it began (a gate is settled before the
    # attempt that reads its outcome): whether one was rejected costs no query here.
    rejected = any(
        r.kind == InputKind.APPROVAL and r.outcome == GateOutcome.REJECTED
        for r in context.inputs.values()
    )
    try:
        return lifecycle.task_complete(
            task_id=task.pk,
            attempt=task.attempt,
            result=result,
            rejected=rejected,
            tenant=task.tenant,
        ).state
    except lifecycle.LifecycleError:
        return _state_of(task.pk)


def _fail(
    task: Task,
    message: str,
    code: int = lifecycle.INTERNAL_ERROR,
    data: Any = None,
    failure: dict[str, Any] | None = None,
) -> str | None:
    try:
        return lifecycle.task_fail(
            task_id=task.pk,
            attempt=task.attempt,
            actor=Actor.system("worker"),
            error=error_object(message, code=code, data=data),
            failure=failure,
        ).state
    except lifecycle.LifecycleError:
        return _state_of(task.pk)
