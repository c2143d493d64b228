"""The approval page of a gate (ctx.approve): what is approved, who decided, and the reviewer's
own decision — and the tenant admins' management of approval policies and reviewer groups.
Eligibility and who manages are access's; the decision is lifecycle's; rules and groups are
saved by approval_policies (the one writer, as for the REST API)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse

from dashboard import approval_forms, forms
from dashboard.pages import (
    actor_for,
    current_tenant,
    denied,
    page,
    render_fragment,
    render_page,
)
from mcptasks import access, approval_policies, lifecycle, wire
from mcptasks.models import ApprovalPolicyRule, InputRequest, InputState, ReviewerGroup, Task

RECENT_RUNS = 5


def gate_context(user: Any, task: Task, gate: InputRequest) -> dict[str, Any]:
    """What a reviewer decides on: the summary, the policy, the decisions so far and who else
    may decide."""
    policy = access.gate_policy(gate)
    # The tool's secret arguments, and the fields the gate's policy masks (tool and rule).
    sensitive = wire.sensitive_keys_of(task.tool_name) | frozenset(policy.get("redact") or ())
    decisions = list(gate.decisions.select_related("reviewer").order_by("created_at", "id"))
    bound = approval_policies.bound_rules_digest(task.policy_revision)
    declared = str(policy.get("binding") or "")[: len(bound) or None]
    return {
        "message": _masked_text(
            str((gate.params or {}).get("message") or gate.key), task.arguments, policy
        ),
        "summary": wire.shown((gate.gate or {}).get("summary") or {}, sensitive),
        "policy": policy,
        "bound_digest": bound,
        "binding_changed": bool(bound) and declared != bound,
        "sees_task": bool(access.can(user, access.Action.VIEW, task)),
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


def _masked_text(text: str, arguments: Any, policy: dict[str, Any]) -> str:
    """``text`` (the gate's message, written by the tool) with the values of the arguments the
    policy masks replaced too, so a masked field is not read back from the question."""
    masked = set(policy.get("redact") or ())
    if not isinstance(arguments, dict):
        return text
    for name in sorted(masked):
        value = arguments.get(name)
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            shown = str(value)
            if len(shown) >= 2:
                text = text.replace(shown, "[REDACTED]")
    return text


def approval_page(request: HttpRequest, task: Task, gate: InputRequest) -> HttpResponse:
    context: dict[str, Any] = {
        "task": task,
        "input": gate,
        **gate_context(request.user, task, gate),
    }
    if request.method == "GET" and request.GET.get("fragment") == "live":
        # The progress and the decisions, for the page's live refresh.
        return render_fragment(request, "dashboard/_approval_live.html", context)
    if gate.state != InputState.PENDING:
        return render_page(request, "dashboard/approval.html", {**context, "closed": True})
    mine = next((d for d in context["decisions"] if d.reviewer_id == request.user.pk), None)
    if mine is not None:
        # Decided once: a second decision is refused (lifecycle), so no form is offered.
        return render_page(request, "dashboard/approval.html", {**context, "mine": mine})
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
        return redirect(_after_decision(context, task, gate))
    verdict = "Approved" if form.cleaned_data["verdict"] == "approve" else "Rejected"
    messages.success(request, f"{verdict} {gate.key!r}.")
    return redirect(_after_decision(context, task, gate, "#timeline"))


def _after_decision(
    context: dict[str, Any], task: Task, gate: InputRequest, anchor: str = ""
) -> str:
    """The task page for a reviewer who sees the task; the approval page (their decision on
    it) for one whom only the gate's policy lets see it."""
    if context["sees_task"]:
        return reverse("dashboard:task", args=[task.pk]) + anchor
    return reverse("dashboard:answer", args=[task.pk, gate.key])


# ---------------------------------------------------------------- policies and groups
def _managed_tenant(request: HttpRequest) -> Any:
    """The tenant whose approval policies the page manages (the switcher's), or a 403 page
    when the user is not its admin."""
    tenant = current_tenant(request)
    if tenant is None:
        raise Http404("No tenant")
    allowed = access.may_manage_approvals(request.user, tenant.pk)
    return tenant if allowed else denied(request, allowed.reason)


def _policies_page(
    request: HttpRequest,
    tenant: Any,
    *,
    rule_form: Any = None,
    group_form: Any = None,
    status: int = 200,
) -> HttpResponse:
    rules = list(
        ApprovalPolicyRule.objects.filter(tenant=tenant, active=True)
        .select_related("created_by")
        .order_by("tool_name", "key", "argument", "value")
    )
    groups = list(
        ReviewerGroup.objects.filter(tenant=tenant).prefetch_related("members").order_by("name")
    )
    return render_page(
        request,
        "dashboard/approval_policies.html",
        {
            "tenant": tenant,
            "rules": rules,
            "groups": groups,
            "rule_form": rule_form or approval_forms.PolicyRuleForm(tenant=tenant),
            "group_form": group_form or approval_forms.ReviewerGroupForm(tenant=tenant),
        },
        status=status,
    )


def _save_rule(request: HttpRequest, tenant: Any, form: Any) -> ApprovalPolicyRule:
    data = form.cleaned_data
    return approval_policies.save_rule(
        tenant=tenant,
        actor=actor_for(request.user),
        created_by=request.user,
        tool_name=data["tool"],
        key=data["key"],
        argument=data["argument"],
        value=data["value"],
        required=data["required"],
        roles=list(data["roles"]),
        groups=list(data["groups"]),
        users=data["users"],
        redact=data["redact"],
    )


@page
def approval_policies_page(request: HttpRequest) -> HttpResponse:
    """Tenant admins: the active approval rules and reviewer groups, and forms to add them."""
    tenant = _managed_tenant(request)
    if isinstance(tenant, HttpResponse):
        return tenant
    if request.method != "POST":
        return _policies_page(request, tenant)
    form = approval_forms.PolicyRuleForm(request.POST, tenant=tenant)
    if not form.is_valid():
        return _policies_page(request, tenant, rule_form=form, status=422)
    rule = _save_rule(request, tenant, form)
    messages.success(request, f"Saved the policy for {rule.tool_name} (version {rule.version}).")
    return redirect(reverse("dashboard:approval_policies"))


def _rule_of(request: HttpRequest, rule_id: int) -> Any:
    """An active rule of a tenant the user administers; 404 when the user does not belong to
    its tenant or there is no such rule, 403 (the reason) when they are not its admin."""
    rule = (
        ApprovalPolicyRule.objects.select_related("tenant")
        .filter(pk=rule_id, active=True, tenant_id__in=access.member_tenant_ids(request.user))
        .first()
    )
    if rule is None:
        raise Http404("No such approval policy")
    allowed = access.may_manage_approvals(request.user, rule.tenant_id)
    return rule if allowed else denied(request, allowed.reason)


@page
def approval_rule_page(request: HttpRequest, rule_id: int) -> HttpResponse:
    """Edit (tighten, loosen) a rule: its selector stays, its policy gets a new version."""
    rule = _rule_of(request, rule_id)
    if isinstance(rule, HttpResponse):
        return rule
    fixed = {
        "tool_name": rule.tool_name,
        "key": rule.key,
        "argument": rule.argument,
        "value": rule.value,
    }
    initial = {
        "required": rule.required,
        "roles": list(rule.roles),
        "groups": list(rule.groups),
        "users": " ".join(rule.users),
        "redact": " ".join(rule.redact),
    }
    data = request.POST if request.method == "POST" else None
    form = approval_forms.PolicyRuleForm(data, tenant=rule.tenant, fixed=fixed, initial=initial)
    if request.method == "POST" and form.is_valid():
        saved = _save_rule(request, rule.tenant, form)
        messages.success(
            request, f"Saved the policy for {saved.tool_name} (version {saved.version})."
        )
        return redirect(reverse("dashboard:approval_policies"))
    return render_page(
        request,
        "dashboard/approval_rule.html",
        {"rule": rule, "form": form},
        status=422 if request.method == "POST" else 200,
    )


@page
def approval_rule_delete(request: HttpRequest, rule_id: int) -> HttpResponse:
    """Withdraw a rule (POST): gates fall back to the tool's own policy; audited."""
    if request.method != "POST":
        return redirect(reverse("dashboard:approval_rule", args=[rule_id]))
    rule = _rule_of(request, rule_id)
    if isinstance(rule, HttpResponse):
        return rule
    try:
        approval_policies.delete_rule(
            tenant=rule.tenant,
            actor=actor_for(request.user),
            created_by=request.user,
            rule_id=rule.pk,
        )
    except ApprovalPolicyRule.DoesNotExist:
        raise Http404("No such approval policy") from None
    messages.success(request, f"Deleted the policy for {rule.tool_name}.")
    return redirect(reverse("dashboard:approval_policies"))


def _save_group(request: HttpRequest, tenant: Any, form: Any) -> ReviewerGroup | None:
    try:
        return approval_policies.save_group(
            tenant=tenant,
            actor=actor_for(request.user),
            name=form.cleaned_data["name"],
            members=list(form.cleaned_data["members"]),
        )
    except ValueError as exc:
        form.add_error("members", f"{str(exc)[:1].upper()}{str(exc)[1:]}.")
        return None


@page
def reviewer_groups_create(request: HttpRequest) -> HttpResponse:
    """Create a reviewer group of the tenant (POST from the policies page)."""
    tenant = _managed_tenant(request)
    if isinstance(tenant, HttpResponse):
        return tenant
    if request.method != "POST":
        return redirect(reverse("dashboard:approval_policies"))
    form = approval_forms.ReviewerGroupForm(request.POST, tenant=tenant)
    group = _save_group(request, tenant, form) if form.is_valid() else None
    if group is None:
        return _policies_page(request, tenant, group_form=form, status=422)
    messages.success(request, f"Saved the reviewer group {group.name}.")
    return redirect(reverse("dashboard:approval_policies"))


@page
def reviewer_group_page(request: HttpRequest, name: str) -> HttpResponse:
    """Edit a reviewer group's members."""
    tenant = _managed_tenant(request)
    if isinstance(tenant, HttpResponse):
        return tenant
    group = ReviewerGroup.objects.filter(tenant=tenant, name=name).first()
    if group is None:
        raise Http404("No such reviewer group")
    initial = {"members": sorted(u.get_username() for u in group.members.all())}
    data = request.POST if request.method == "POST" else None
    form = approval_forms.ReviewerGroupForm(
        data, tenant=tenant, fixed_name=group.name, initial=initial
    )
    saved = request.method == "POST" and form.is_valid() and _save_group(request, tenant, form)
    if saved:
        messages.success(request, f"Saved the reviewer group {group.name}.")
        return redirect(reverse("dashboard:approval_policies"))
    return render_page(
        request,
        "dashboard/reviewer_group.html",
        {"group": group, "form": form, "tenant": tenant},
        status=422 if request.method == "POST" else 200,
    )
