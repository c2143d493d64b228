"""Template helpers of the dashboard: times, badges, JSON, audit summaries."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from audit import actions as audit_actions
from mcptasks import task_ids, wire
from mcptasks.models import Task, TaskState
from mcptasks.wire import WIRE_STATUS

register = template.Library()

STATE_TONE = {
    "working": "info",
    "input_required": "warn",
    "completed": "ok",
    "failed": "bad",
    "cancelled": "muted",
}
STATE_TONE_OVERRIDES = {
    TaskState.AWAITING_OPERATOR: "warn",
    TaskState.NEEDS_RECONCILIATION: "bad",
    TaskState.QUEUED: "muted",
}
EFFECT_TONE = {
    "intended": "info",
    "applied": "ok",
    "failed": "bad",
    "unknown": "bad",
    "reconciled_applied": "ok",
    "reconciled_not_applied": "muted",
}
INPUT_TONE = {"pending": "warn", "answered": "ok", "superseded": "muted", "expired": "muted"}


def _relative(seconds: float) -> str:
    """Roughly how long: "just now", "5 min ago", "in 3 h" (as the page script writes it)."""
    span = abs(seconds)
    if span < 45:
        return "just now" if seconds >= 0 else "in a moment"
    if span < 3600:
        text = f"{round(span / 60)} min"
    elif span < 86_400:
        text = f"{round(span / 3600)} h"
    else:
        text = f"{round(span / 86_400)} d"
    return f"{text} ago" if seconds >= 0 else f"in {text}"


def local_stamp(moment: datetime, *, seconds: bool = False) -> str:
    """``moment`` in the viewer's time zone (the one the request activated), with its offset:
    "2026-12-01 18:52 +09:00", "… UTC" at offset zero — as the page's script writes it."""
    local = timezone.localtime(moment)
    stamp = local.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")
    offset = local.strftime("%z")
    zone = "UTC" if offset in ("+0000", "") else f"{offset[:3]}:{offset[3:]}"
    return f"{stamp} {zone}"


@register.simple_tag
def reltime(moment: datetime | None) -> SafeString | str:
    """``<time>`` with the absolute time in the viewer's time zone and the relative time beside
    it (the page's script keeps the relative text fresh); the UTC time is its title."""
    if moment is None:
        return "—"
    relative = _relative((timezone.now() - moment).total_seconds())
    return format_html(
        '<time datetime="{}" title="{}" data-relative><span class="abs">{}</span>'
        ' <span class="sep" aria-hidden="true">·</span> <span class="rel">{}</span></time>',
        moment.isoformat(),
        f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC",
        local_stamp(moment),
        relative,
    )


@register.simple_tag
def abstime(moment: datetime | None) -> SafeString | str:
    """``<time>`` with the absolute time, to the second, in the viewer's time zone."""
    if moment is None:
        return "—"
    return format_html(
        '<time datetime="{}" data-seconds><span class="abs">{}</span></time>',
        moment.isoformat(),
        local_stamp(moment, seconds=True),
    )


@register.filter
def state_label(state: str) -> str:
    return state.replace("_", " ")


@register.simple_tag
def state_badge(state: str, outcome: str = "", status: str = "") -> SafeString:
    """The internal state as a badge toned by what it asks of people; a completed task whose
    approval was rejected shows *rejected*, never a green "completed". With ``status`` (the
    viewer's, :func:`viewer_status`), the tone is that status's and the badge carries it: a task
    awaiting input that this viewer cannot answer is "working" to them, not a call to act."""
    if outcome == "rejected":
        return format_html(
            '<span class="badge tone-{}" data-state="rejected">rejected</span>', "bad"
        )
    shown = status
    if not status:
        try:
            status = WIRE_STATUS[TaskState(state)]
        except ValueError:
            status = "working"
    tone = STATE_TONE_OVERRIDES.get(state, STATE_TONE.get(status, "info"))  # type: ignore[call-overload]
    if not shown:
        return format_html(
            '<span class="badge tone-{}" data-state="{}">{}</span>', tone, state, state_label(state)
        )
    return format_html(
        '<span class="badge tone-{}" data-state="{}" data-status="{}">{}</span>',
        tone,
        state,
        shown,
        state_label(state),
    )


@register.simple_tag(takes_context=True)
def viewer_statuses(context: template.Context, tasks: Any) -> dict[str, str]:
    """The viewer's status of each task of a page of rows (``wire.viewer_statuses``), for
    :func:`viewer_status` to read instead of asking per row."""
    return wire.viewer_statuses(context["request"].user, list(tasks))


@register.simple_tag(takes_context=True)
def viewer_status(context: template.Context, task: Task) -> str:
    """The status this page's viewer sees for ``task`` — what their tasks/get says
    (``wire.viewer_status``)."""
    known = context.get("viewer_statuses") or {}
    if task.pk in known:
        return str(known[task.pk])
    detail: Any = context.get("detail")
    if detail is not None and detail.task is task:
        # The task page decided on its pending requests already (queries.task_detail).
        decisions = {i.request.pk: i.decision for i in detail.inputs if i.decision is not None}
        pending = [i.request for i in detail.inputs if i.decision is not None]
        return wire.status_of(task, wire.answerable(pending, decisions))
    return wire.viewer_status(context["request"].user, task)


@register.simple_tag
def effect_badge(state: str) -> SafeString:
    return format_html(
        '<span class="badge tone-{}">{}</span>', EFFECT_TONE.get(state, "info"), state_label(state)
    )


@register.simple_tag
def input_badge(state: str) -> SafeString:
    return format_html(
        '<span class="badge tone-{}">{}</span>', INPUT_TONE.get(state, "info"), state_label(state)
    )


@register.filter
def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


@register.filter
def short_id(value: str, length: int = 10) -> str:
    """The first ``length`` characters of an id or a hash; of a task id, those after its day
    prefix (which a day's tasks share)."""
    value = task_ids.distinctive(value)
    return value if len(value) <= length else f"{value[:length]}…"


@register.filter
def get_item(mapping: Any, key: Any) -> Any:
    try:
        return mapping.get(key)
    except AttributeError:
        return None


ACTION_LABELS = audit_actions.LABELS


@register.filter
def action_label(action: str) -> str:
    return ACTION_LABELS.get(action, action)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


@register.filter
def audit_summary(event: Any) -> str:
    """One line saying what an audit event recorded, from its (redacted) data."""
    data = event.data if isinstance(event.data, dict) else {}
    action = event.action
    parts: list[str] = []
    if action == "task.created":
        parts.append(f"tool {_text(data.get('tool', '?'))}")
    elif action == "task.started":
        parts.append(f"attempt {_text(data.get('attempt', '?'))}")
    elif action == "task.input_requested":
        keys = [r.get("key") for r in data.get("requests") or [] if isinstance(r, dict)]
        audiences = {r.get("audience") for r in data.get("requests") or [] if isinstance(r, dict)}
        parts.append(f"{', '.join(map(str, keys))} (for {', '.join(sorted(map(str, audiences)))})")
    elif action == "task.input_answered":
        response = data.get("response") if isinstance(data.get("response"), dict) else {}
        comment = ((response or {}).get("_meta") or {}).get("io.mcptasks/comment")
        parts.append(
            f"{_text(data.get('key', '?'))}: {_text(data.get('action', '?'))} "
            f"via {_text(data.get('via', '?'))}"
        )
        if comment:
            parts.append(f"“{_text(comment)}”")
    elif action in ("task.cancel_requested", "task.force_cancelled"):
        parts.append(f"reason: {_text(data.get('reason') or '—')}")
    elif action == "effect.unknown":
        parts.append(f"step {_text(data.get('step', '?'))}")
        if data.get("cause"):
            parts.append(f"({_text(data['cause'])})")
    elif action == "effect.reconciled":
        parts.append(
            f"step {_text(data.get('step', '?'))}: "
            f"{_text(data.get('decision', '?')).replace('_', ' ')}"
        )
        if data.get("external_ref"):
            parts.append(f"ref {_text(data['external_ref'])}")
        if data.get("note"):
            parts.append(f"— {_text(data['note'])}")
    elif action in ("approval.approved", "approval.rejected"):
        parts.append(
            f"{_text(data.get('key', '?'))} via {_text(data.get('via', '?'))} "
            f"({_text(data.get('approvals', '?'))} of {_text(data.get('required', '?'))})"
        )
        if data.get("comment"):
            parts.append(f"— {_text(data['comment'])}")
    elif action == "task.completed" and data.get("outcome") == "rejected":
        parts.append("rejected")
    elif action in ("delegation.granted", "delegation.revoked"):
        role = "approver" if data.get("delegation") == "answer" else "viewer"
        parts.append(f"{_text(data.get('grantee', '?'))} as {role}")
    elif action == "task.failed":
        error = data.get("error") if isinstance(data.get("error"), dict) else {}
        parts.append(_text((error or {}).get("message", "")))
    elif action in ("token.issued", "token.revoked"):
        parts.append(
            f"{_text(data.get('name') or data.get('lookup') or '')} "
            f"of {_text(data.get('owner', '?'))}"
        )
    elif action == "audit.exported":
        parts.append(f"{_text(data.get('count', '?'))} events as {_text(data.get('format', '?'))}")
    elif data.get("reason"):
        parts.append(f"reason: {_text(data['reason'])}")
    text = " ".join(part for part in parts if part)
    return text if len(text) <= 300 else text[:299] + "…"


@register.filter
def redacted(value: Any) -> Any:
    """Free text (status messages, reasons, questions) — or any stored value — as the
    dashboard may show it."""
    from audit.redact import redact_text

    if value is None or value == "":
        return ""
    return redact_text(value) if isinstance(value, str) else wire.shown(value)


SORT_LABELS = {
    "-created": "newest first",
    "created": "oldest first",
    "-updated": "most recently updated first",
    "updated": "least recently updated first",
}


@register.simple_tag
def sort_label(sort: str) -> str:
    return SORT_LABELS.get(sort, SORT_LABELS["-created"])


@register.simple_tag(takes_context=True)
def sort_header(
    context: template.Context, label: str, column: str, current: str, css: str = ""
) -> SafeString:
    """A column header that sorts the list by ``column`` (newest first, then oldest first on a
    second click), with ``aria-sort`` saying how the list is sorted now."""
    params = context["request"].GET.copy()
    for cursor in ("older", "newer"):
        params.pop(cursor, None)
    descending = f"-{column}"
    params["sort"] = column if current == descending else descending
    state = {descending: "descending", column: "ascending"}.get(current, "none")
    arrow = {"descending": " ↓", "ascending": " ↑"}.get(state, "")
    return format_html(
        '<th scope="col" class="{}" aria-sort="{}"><a href="?{}" hx-boost="true" '
        'hx-target="#task-results" hx-select="#task-results" hx-swap="outerHTML" '
        'hx-push-url="true">{}<span aria-hidden="true">{}</span></a></th>',
        f"sortable {css}".strip(),
        state,
        params.urlencode(),
        label,
        arrow,
    )
