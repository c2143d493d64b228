"""Dashboard views: inbox, tasks list and detail, answering input, cancel, force cancel,
reconcile, delegations, tenant switcher.

Every view parses, authorizes through ``access``, calls a ``lifecycle`` verb and renders
(STYLE rule 4): none assigns a state. Objects the user may not see answer 404, whatever the
reason; visible objects with a forbidden action answer 403 with the reason.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from dashboard import forms
from dashboard.approvals import approval_page
from dashboard.filter_disclosure import disclosure
from dashboard.pages import (
    SESSION_TENANT,
    actor_for,
    current_tenant,
    denied,
    may_bulk,
    page,
    render_fragment,
    render_page,
    safe_next,
    scope_counts,
    scope_of,
    start_url_name,
    task_for,
    tenant_choices,
    waiting_elsewhere,
    wants_fragment,
)
from mcptasks import access, lifecycle, queries
from mcptasks.models import InputKind, InputRequest, InputState, Task, TaskState
from mcptasks.tools.context import ELICIT

User = get_user_model()


def _task_for(
    request: HttpRequest, task_id: str, action: access.Action
) -> tuple[Task, HttpResponse | None]:
    """The doorway (:func:`dashboard.pages.task_for`): the visible task (else 404) and, when
    ``action`` is not permitted on it, the 403 page."""
    return task_for(request, task_id, action)


def _detail_url(task_id: str, anchor: str = "") -> str:
    url = reverse("dashboard:task", args=[task_id])
    return f"{url}#{anchor}" if anchor else url


def _refused(request: HttpRequest, exc: lifecycle.LifecycleError, task_id: str) -> HttpResponse:
    """A lifecycle verb refused the move (the task moved on meanwhile): say so, show the task."""
    messages.error(request, f"Nothing changed: {exc}.")
    return redirect(_detail_url(task_id))


# ---------------------------------------------------------------- tenant switcher
@page
@require_POST
def switch_tenant(request: HttpRequest) -> HttpResponse:
    form = forms.TenantSwitchForm(request.POST)
    slugs = {choice.tenant.slug for choice in tenant_choices(request)}
    if form.is_valid() and form.cleaned_data["tenant"] in slugs:
        request.session[SESSION_TENANT] = form.cleaned_data["tenant"]
    back = safe_next(request, request.POST.get("next") or "", reverse("dashboard:tasks"))
    return HttpResponseRedirect(back)


# ---------------------------------------------------------------- start page
@page
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    """``/`` and the landing after login: the page where this user's work is."""
    return redirect(start_url_name(request.user))


# ---------------------------------------------------------------- inbox
@page
@require_GET
def inbox(request: HttpRequest) -> HttpResponse:
    """Everything waiting on this user in the tenant scope (``?tenant=``, else the switcher's;
    "" for all their tenants); ``?fragment=1`` renders the lists alone (live)."""
    scope = scope_of(request, request.GET)
    found = queries.inbox(request.user, tenant_id=scope.tenant_id) if not scope.error else None
    context: dict[str, Any] = {
        "inbox": found or queries.Inbox(),
        "scope": scope,
        "stuck_after_s": queries.STUCK_CANCEL_S,
    }
    if request.GET.get("fragment"):
        return render_fragment(request, "dashboard/_inbox_content.html", context)
    if found is not None:
        context["elsewhere"] = waiting_elsewhere(request, scope.tenant)
    return render_page(request, "dashboard/inbox.html", context, status=400 if scope.error else 200)


@page
@require_GET
def inbox_counts(request: HttpRequest) -> HttpResponse:
    """The navigation's inbox badge (live), in the switcher's tenant like the navigation's."""
    counts = scope_counts(request, current_tenant(request))
    return render_fragment(request, "dashboard/_counts.html", {"nav_counts": counts})


# ---------------------------------------------------------------- tasks list
def _task_filters(request: HttpRequest) -> tuple[forms.TaskFilterForm, queries.TaskFilters]:
    choices = tenant_choices(request)
    data = request.GET.copy()
    if "tenant" not in data:
        tenant = current_tenant(request)
        data["tenant"] = tenant.slug if tenant else ""
    form = forms.TaskFilterForm(
        data,
        tenants=[(c.tenant.slug, c.tenant.name) for c in choices],
        states=list(TaskState.values),
        tools=queries.tool_names(),
    )
    if not form.is_valid():
        return form, queries.TaskFilters(tenant_id=-1)  # an invalid filter shows nothing
    cleaned = form.cleaned_data
    tenant_ids = {c.tenant.slug: c.tenant.pk for c in choices}
    return form, queries.TaskFilters(
        tenant_id=tenant_ids.get(cleaned["tenant"]) if cleaned["tenant"] else None,
        state=cleaned["state"],
        tool=cleaned["tool"],
        principal=cleaned["principal"].strip(),
        created_from=cleaned["created_from"],
        created_to=cleaned["created_to"],
        search=cleaned["q"].strip(),
        outcome=cleaned["outcome"],
        error_code=cleaned["error_code"],
        sort=cleaned["sort"] or queries.DEFAULT_SORT,
    )


@page
@require_GET
def task_list(request: HttpRequest) -> HttpResponse:
    form, filters = _task_filters(request)
    result = queries.task_page(
        request.user,
        filters,
        older_than=request.GET.get("older"),
        newer_than=request.GET.get("newer"),
        with_total=form.is_valid(),
    )
    scope = current_tenant(request)
    fragment = wants_fragment(request, "task-results")
    context = {
        "form": form,
        "page": result,
        "sort": filters.sort,
        "count_cap": queries.listing.COUNT_CAP,
        "may_bulk": may_bulk(request),
        "first_page": not request.GET.get("older") and not request.GET.get("newer"),
        "filters": disclosure(
            form, request.GET, defaults={"tenant": scope.slug if scope else ""}, ignore={"sort"}
        ),
        "filters_oob": fragment,  # the swap also updates the summary's "N active"
    }
    if fragment:
        return render_fragment(request, "dashboard/_task_results.html", context)
    return render_page(request, "dashboard/tasks.html", context)


@page
@require_GET
def task_row(request: HttpRequest, task_id: str) -> HttpResponse:
    """One list row (live updates); 204 when the task is not visible or not in the filters."""
    filters = _task_filters(request)[1] if request.GET.get("filtered") else None
    task = queries.task_row(request.user, task_id, filters)
    if task is None:
        return HttpResponse(status=204)
    return render_fragment(
        request, "dashboard/_task_row.html", {"task": task, "may_bulk": may_bulk(request)}
    )


# ---------------------------------------------------------------- task detail
@page
@require_GET
def task_detail(request: HttpRequest, task_id: str) -> HttpResponse:
    """The task; ``?fragment=live`` renders its live sections alone."""
    task, _ = task_for(request, task_id)
    detail = queries.task_detail(request.user, task)
    context = {
        "detail": detail,
        "task": task,
        "cancel_form": forms.CancelForm(),
        "force_form": forms.ForceCancelForm(),
        "reconcile_form": forms.ReconcileForm(),
        "delegation_form": forms.DelegationForm(detail.candidates),
        "max_attempts": settings.MCPTASKS_MAX_ATTEMPTS,
    }
    if request.GET.get("fragment") == "live":
        return render_fragment(request, "dashboard/_task_live.html", context)
    return render_page(request, "dashboard/task_detail.html", context)


# ---------------------------------------------------------------- answering input
def _answer_forms(request_row: InputRequest, data: Any = None) -> dict[str, Any]:
    if request_row.method == ELICIT and request_row.params.get("mode", "form") == "form":
        content: Any = forms.ElicitationForm(request_row.params, data)
    elif request_row.method == ELICIT:
        content = None  # URL mode: accept / decline / cancel only
    else:
        content = forms.RawAnswerForm(request_row.method, request_row.params, data)
    return {"content_form": content, "decision_form": forms.DecisionForm(data)}


def _answer(form_set: dict[str, Any], request_row: InputRequest) -> dict[str, Any] | None:
    """The validated response of a submitted answer, or None with the forms' errors set."""
    decision = form_set["decision_form"]
    if not decision.is_valid():
        return None
    action = decision.cleaned_data["action"]
    content_form = form_set["content_form"]
    if request_row.method != ELICIT or (action == "accept" and content_form is not None):
        response = content_form.answer()
    else:
        response = {"action": action}
    if response is None:
        return None
    comment = decision.cleaned_data["comment"].strip()
    if comment:
        # Kept with the answer and its audit event; the tool reads only action and content.
        response = {**response, "_meta": {"io.mcptasks/comment": comment}}
    return response


@page
def answer_input(request: HttpRequest, task_id: str, key: str) -> HttpResponse:
    try:
        task, request_row = access.input_for(request.user, task_id, key)
    except access.TaskHidden:
        raise Http404("No such input request") from None
    if request_row is None:
        raise Http404("No such input request")
    context: dict[str, Any] = {"task": task, "input": request_row}
    if request_row.kind == InputKind.APPROVAL:
        return approval_page(request, task, request_row)
    if request_row.state != InputState.PENDING:
        return render_page(request, "dashboard/answer.html", {**context, "closed": True})
    decision = access.may_answer(request.user, request_row, task)
    if not decision:
        return render_page(
            request, "dashboard/answer.html", {**context, "refusal": decision.reason}, status=403
        )
    if request.method != "POST":
        return render_page(
            request, "dashboard/answer.html", {**context, **_answer_forms(request_row)}
        )
    form_set = _answer_forms(request_row, request.POST)
    response = _answer(form_set, request_row)
    if response is None:
        return render_page(request, "dashboard/answer.html", {**context, **form_set}, status=422)
    try:
        lifecycle.task_answer_input(
            task_id=task.pk,
            key=request_row.key,
            response=response,
            actor=actor_for(request.user, task),
            via="dashboard",
        )
    except lifecycle.LifecycleError as exc:
        return _refused(request, exc, task.pk)
    outcome = response.get("action", "sent")
    messages.success(request, f"Answered {request_row.key!r}: {outcome}.")
    return redirect(_detail_url(task.pk, "timeline"))


# ---------------------------------------------------------------- cancel, force cancel
def _action_form_invalid(request: HttpRequest, task: Task, form: Any, what: str) -> HttpResponse:
    errors = "; ".join(
        f"{name}: {', '.join(errs)}" if name != "__all__" else ", ".join(errs)
        for name, errs in form.errors.items()
    )
    messages.error(request, f"{what} needs {errors}".rstrip())
    return redirect(_detail_url(task.pk, "actions"))


@page
@require_POST
def cancel_task(request: HttpRequest, task_id: str) -> HttpResponse:
    task, refusal = _task_for(request, task_id, access.Action.CANCEL)
    if refusal is not None:
        return refusal
    form = forms.CancelForm(request.POST)
    if not form.is_valid():
        return _action_form_invalid(request, task, form, "Cancelling")
    try:
        outcome = lifecycle.task_request_cancel(
            task_id=task.pk, actor=actor_for(request.user, task), reason=form.cleaned_data["reason"]
        )
    except lifecycle.LifecycleError as exc:
        return _refused(request, exc, task.pk)
    if outcome.ended:
        messages.info(request, f"Task already {outcome.task.state}; nothing to cancel.")
    else:
        messages.success(
            request,
            "Cancelled."
            if outcome.result == lifecycle.CancelResult.CANCELLED
            else "Cancel requested: the task stops at its next safe point.",
        )
    return redirect(_detail_url(task.pk, "timeline"))


@page
@require_POST
def force_cancel_task(request: HttpRequest, task_id: str) -> HttpResponse:
    task, refusal = _task_for(request, task_id, access.Action.FORCE_CANCEL)
    if refusal is not None:
        return refusal
    form = forms.ForceCancelForm(request.POST)
    if not form.is_valid():
        return _action_form_invalid(request, task, form, "Force cancel")
    try:
        lifecycle.task_force_cancel(
            task_id=task.pk, actor=actor_for(request.user, task), reason=form.cleaned_data["reason"]
        )
    except lifecycle.LifecycleError as exc:
        return _refused(request, exc, task.pk)
    messages.success(request, "Force-cancelled.")
    return redirect(_detail_url(task.pk, "timeline"))


@page
@require_POST
def retry_task(request: HttpRequest, task_id: str) -> HttpResponse:
    task, refusal = _task_for(request, task_id, access.Action.RETRY)
    if refusal is not None:
        return refusal
    try:
        retry = lifecycle.task_retry(task_id=task.pk, actor=actor_for(request.user, task))
    except lifecycle.LifecycleError as exc:
        return _refused(request, exc, task.pk)
    messages.success(request, f"Retrying from step {(task.failure or {}).get('step') or '1'}.")
    return redirect(_detail_url(retry.pk, "timeline"))


# ---------------------------------------------------------------- reconcile
@page
def reconcile_effect(request: HttpRequest, effect_id: int) -> HttpResponse:
    try:
        effect = access.effect_for(request.user, effect_id, access.Action.RECONCILE)
    except access.TaskHidden:
        raise Http404("No such effect") from None
    except access.Refused as refused:
        return denied(request, refused.decision.reason)
    task = effect.task
    form = forms.ReconcileForm(request.POST if request.method == "POST" else None)
    context = {"effect": effect, "task": task, "form": form}
    if request.method != "POST":
        return render_page(request, "dashboard/reconcile.html", context)
    if not form.is_valid():
        return render_page(request, "dashboard/reconcile.html", context, status=422)
    try:
        lifecycle.task_reconcile_effect(
            effect_id=effect.pk,
            actor=actor_for(request.user, task),
            decision=form.cleaned_data["decision"],
            note=form.cleaned_data["note"],
            external_ref=form.cleaned_data["external_ref"].strip(),
        )
    except lifecycle.AttemptMayBeAlive as exc:
        form.add_error("decision", f"{exc}.")
        return render_page(request, "dashboard/reconcile.html", context, status=409)
    except lifecycle.LifecycleError as exc:
        return _refused(request, exc, task.pk)
    messages.success(
        request,
        f"Step {effect.step!r} reconciled: {form.cleaned_data['decision'].replace('_', ' ')}.",
    )
    return redirect(_detail_url(task.pk, "timeline"))


# ---------------------------------------------------------------- delegations
@page
@require_POST
def grant_delegation(request: HttpRequest, task_id: str) -> HttpResponse:
    task, refusal = _task_for(request, task_id, access.Action.GRANT)
    if refusal is not None:
        return refusal
    form = forms.DelegationForm(list(access.delegation_candidates(task)), request.POST)
    if not form.is_valid():
        return _action_form_invalid(request, task, form, "Naming someone")
    grantee = User.objects.get(pk=int(form.cleaned_data["grantee"]))
    allowed = access.may_name(request.user, grantee, task, form.cleaned_data["delegation"])
    if not allowed:
        return denied(request, allowed.reason)
    lifecycle.task_grant_delegation(
        task_id=task.pk,
        actor=actor_for(request.user, task),
        grantee=grantee,
        delegation=form.cleaned_data["delegation"],
    )
    role = "approver" if form.cleaned_data["delegation"] == "answer" else "viewer"
    messages.success(request, f"{grantee.get_username()} is now a named {role} of this task.")
    return redirect(_detail_url(task.pk, "delegations"))


@page
@require_POST
def revoke_delegation(request: HttpRequest, task_id: str) -> HttpResponse:
    task, refusal = _task_for(request, task_id, access.Action.GRANT)
    if refusal is not None:
        return refusal
    form = forms.RevokeDelegationForm(request.POST)
    grantee = (
        User.objects.filter(pk=form.cleaned_data["grantee"]).first() if form.is_valid() else None
    )
    if grantee is None:
        raise Http404("No such delegation")
    try:
        lifecycle.task_grant_delegation(
            task_id=task.pk,
            actor=actor_for(request.user, task),
            grantee=grantee,
            delegation=form.cleaned_data["delegation"],
            revoke=True,
        )
    except lifecycle.DelegationNotHeld as exc:
        context = {"task": task, "reason": str(exc)}
        return render_page(request, "dashboard/nothing_to_revoke.html", context, status=404)
    messages.success(
        request, f"Revoked {grantee.get_username()}'s {form.cleaned_data['delegation']} right."
    )
    return redirect(_detail_url(task.pk, "delegations"))
