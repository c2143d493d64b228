"""The task page's timeline, folded for an SRE (issue 22).

A durable sleep writes three audit events — ``task.sleeping``, ``task.woken`` (the timer) and
``task.started`` (the run that resumes) — and shows as one row: "Slept 5.0 s", with the run it
resumed as. Runs are told apart: the first is "Started"; a run after a suspension (timer, input,
reconciliation) is a "Resumed" run; a run after ``task.requeued`` (its worker was lost) is a
"Re-run" and counts against MCPTASKS_MAX_ATTEMPTS. The audit events themselves are unchanged:
each row links the first event it folds.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings


def _seconds(start: Any, end: Any) -> str:
    seconds = (end.created_at - start.created_at).total_seconds()
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def fold(events: list[Any]) -> list[Any]:
    """Oldest first in, oldest first out; folded rows carry ``folded_label`` and
    ``folded_summary`` (the template shows them instead of the event's own)."""
    rows: list[Any] = []
    previous_action = ""
    starts = 0
    index = 0
    while index < len(events):
        event = events[index]
        if event.action == "task.sleeping":
            woken = events[index + 1] if index + 1 < len(events) else None
            if woken is not None and woken.action == "task.woken":
                started = events[index + 2] if index + 2 < len(events) else None
                event.folded_label = "Slept"
                summary = f"{_seconds(event, woken)} on a durable timer"
                if started is not None and started.action == "task.started":
                    starts += 1
                    summary += f"; resumed as run {(started.data or {}).get('attempt', starts)}"
                    index += 1
                else:
                    summary += "; queued to resume"
                event.folded_summary = summary
                rows.append(event)
                previous_action = "task.started"
                index += 2
                continue
        if event.action == "task.started":
            starts += 1
            attempt = (event.data or {}).get("attempt", starts)
            if previous_action == "task.requeued":
                event.folded_label = "Re-run"
                event.folded_summary = (
                    f"run {attempt}, after its worker was lost (crash re-runs count against "
                    f"the limit of {settings.MCPTASKS_MAX_ATTEMPTS})"
                )
            elif starts > 1:
                event.folded_label = "Resumed"
                event.folded_summary = f"run {attempt}"
            else:
                event.folded_label = "Started"
                event.folded_summary = f"run {attempt}"
        rows.append(event)
        previous_action = event.action
        index += 1
    return rows
