"""Failures that explain themselves (issue 22).

A run that raises records, beside the sanitized JSON-RPC error the client sees, a diagnosis for
operators on the task row (``Task.failure``): the exception class, the step that was running
(the last ctx step the run reached) and the task's correlation id, bound into every log line of
the task, web and worker. The exception's text is not kept (it may carry anything): the log line
"tool raised", found by the correlation id, has it and its traceback, through the redactor.

An operator may **retry** such a task (``lifecycle.task_retry``). A terminal state never
changes (PROTOCOL K15), so the retry is a new task of the same principal, tool and arguments
(``retry_of`` the failed one) that starts with the failed task's recorded steps and applied
effects copied: its first run replays them and re-runs from the failing step; an applied
effect returns its recorded result and is not repeated.
"""

from __future__ import annotations

import uuid
from typing import Any

from mcptasks.models import Effect, EffectState, Task, TaskStep

APPLIED = (EffectState.APPLIED, EffectState.RECONCILED_APPLIED)


def new_correlation_id() -> str:
    from audit.record import current_request_id

    return current_request_id.get()[:64] or uuid.uuid4().hex


def diagnose(task: Task, sequence: list[str], exc: BaseException) -> dict[str, Any]:
    """What an operator needs to find and understand a failed run."""
    kind = type(exc)
    return {
        "error_class": kind.__name__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}",
        "step": sequence[-1] if sequence else "",
        "attempt": task.attempt,
        "correlation_id": task.correlation_id,
    }


def retry_refusal(task: Task) -> str | None:
    """Why ``task`` cannot be retried, or None."""
    from mcptasks.tools.registry import registry

    if task.state != "failed" or not task.failure:
        return "only a task that failed with an exception in its tool can be retried"
    tool_def = registry.get(task.tool_name)
    if tool_def is None:
        return f"tool {task.tool_name!r} is no longer available"
    if not tool_def.retryable:
        return f"tool {task.tool_name!r} does not allow retries"
    unsettled = (
        Effect.objects.filter(task_id=task.pk)
        .exclude(state__in=APPLIED)
        # An idempotent effect runs again with the same key whatever its outcome was: intended,
        # or unknown (every ending verb turns intended effects unknown: lifecycle).
        .exclude(state__in=(EffectState.INTENDED, EffectState.UNKNOWN), idempotent=True)
    ).values_list("step", flat=True)
    if unsettled:
        return (
            f"effects with an unknown outcome ({', '.join(unsettled)}) would be repeated: "
            "not retryable"
        )
    return None


def copy_progress(source: Task, target: Task) -> None:
    """Give ``target`` the recorded steps and applied effects of ``source`` (its task row, the
    step log and ``retry_of``, is written by lifecycle.task_retry)."""
    TaskStep.objects.bulk_create(
        [
            TaskStep(task_id=target.pk, key=step.key, kind=step.kind, value=step.value)
            for step in TaskStep.objects.filter(task_id=source.pk)
        ]
    )
    Effect.objects.bulk_create(
        [
            Effect(
                task_id=target.pk,
                tenant_id=effect.tenant_id,
                step=effect.step,
                idempotency_key=effect.idempotency_key,
                idempotent=effect.idempotent,
                state=effect.state,
                result=effect.result,
                external_ref=effect.external_ref,
                attempt=effect.attempt,
            )
            for effect in Effect.objects.filter(task_id=source.pk, state__in=APPLIED)
        ]
    )
