"""The approval page of a gate (ctx.approve): what is approved, who decided, and the reviewer's
own decision. Eligibility is access.may_decide's; the decision is lifecycle's."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse

from dashboard import forms
from dashboard.pages import actor_for, render_page
from mcptasks import access, lifecycle, wire
from mcptasks.models import InputRequest, Task

RECENT_RUNS = 5


def gate_context(user: Any, task: Task, gate: InputRequest) -> dict[str, Any]:
    """What a reviewer decides on: the summary, the policy, the decisions so far and who else
    may decide."""
    sensitive = wire.sensitive_keys_of(task.tool_name)
    policy = access.gate_policy(gate)
    decisions = list(gate.decisions.select_related("reviewer").order_by("created_at", "id"))
    return {
        "summary": wire.shown((gate.gate or {}).get("summary") or {}, sensitive),
        "policy": policy,
        "decisions": decisions,
        "approvals": sum(1 for d in decisions if d.verdict == "approve"),
        "required": int(policy.get("required", 1)),
        "arguments": wire.shown(task.arguments, sensitive),
        "others": [u.get_username() for u in access.eligible_reviewers(gate, task) if u != user],
        "effects": list(task.effects.order_by("created_at", "pk")),
        # The requester's recent runs of the same tool (those this reviewer may see).
        "recent": list(
            access.visible_tasks(user)
            .filter(principal_id=task.principal_id, tool_name=task.tool_name)
            .exclude(pk=task.pk)
            .order_by("-created_at")[:RECENT_RUNS]
        ),
    }


def approval_page(request: HttpRequest, task: Task, gate: InputRequest) -> HttpResponse:
    context: dict[str, Any] = {
        "task": task,
        "input": gate,
        **gate_context(request.user, task, gate),
    }
    decision = access.may_decide(request.user, gate, task)
    if not decision:
        return render_page(
            request, "dashboard/approval.html", {**context, "refusal": decision.reason}, 403
        )
    form = forms.ApprovalDecisionForm(request.POST if request.method == "POST" else None)
    if request.method != "POST" or not form.is_valid():
        status = 422 if request.method == "POST" else 200
        return render_page(request, "dashboard/approval.html", {**context, "form": form}, status)
    try:
        lifecycle.task_decide_approval(
            task_id=task.pk,
            key=gate.key,
            reviewer=request.user,
            verdict=form.cleaned_data["verdict"],
            comment=form.cleaned_data["comment"],
            actor=actor_for(request.user, task),
            via="dashboard",
        )
    except lifecycle.LifecycleError as exc:
        messages.error(request, f"Nothing changed: {exc}.")
        return redirect(reverse("dashboard:task", args=[task.pk]))
    verdict = "Approved" if form.cleaned_data["verdict"] == "approve" else "Rejected"
    messages.success(request, f"{verdict} {gate.key!r}.")
    return redirect(reverse("dashboard:task", args=[task.pk]) + "#timeline")
