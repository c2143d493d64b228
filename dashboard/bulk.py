"""Operators' bulk actions: cancel the tasks ticked on the tasks list, reconcile the effects
ticked in the inbox's reconciliation queue. Each item is authorized through ``access`` and
moved by its own ``lifecycle`` verb — so each is audited on its own — and the page says what
happened to how many."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from functools import wraps

from django import forms as django_forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.urls import reverse
from django.views.decorators.http import require_POST

from dashboard import forms
from dashboard.pages import actor_for, denied, may_bulk, page, safe_next
from mcptasks import access, lifecycle

BULK_MAX = 100


class BulkSelection(django_forms.Form):
    """The ticked items (tasks or effects) and the page to come back to."""

    item = django_forms.MultipleChoiceField(required=True)
    next = django_forms.CharField(required=False, max_length=2000)

    def __init__(self, data: QueryDict) -> None:
        super().__init__(data)
        items: list[str] = data.getlist("item")
        field = self.fields["item"]
        assert isinstance(field, django_forms.MultipleChoiceField)
        field.choices = [(value, value) for value in items[: BULK_MAX + 1]]

    def clean_item(self) -> list[str]:
        items: list[str] = self.cleaned_data["item"]
        if len(items) > BULK_MAX:
            raise django_forms.ValidationError(f"Choose at most {BULK_MAX} at a time.")
        return items


def _back(request: HttpRequest, selection: BulkSelection, default: str) -> HttpResponseRedirect:
    selection.is_valid()
    return HttpResponseRedirect(
        safe_next(request, selection.cleaned_data.get("next") or "", reverse(default))
    )


def _summary(outcomes: Counter[str]) -> str:
    return "; ".join(f"{count} {what}" for what, count in outcomes.items())


def operators_only(view: Callable[[HttpRequest], HttpResponse]) -> Callable[..., HttpResponse]:
    """A bulk action: signed in, POST, and an operator of some tenant (else 403)."""

    @wraps(view)
    def wrapped(request: HttpRequest) -> HttpResponse:
        if not may_bulk(request):
            return denied(request, "bulk actions are for operators")
        return view(request)

    return page(require_POST(wrapped))  # type: ignore[return-value]


_CANCEL_SUMMARY = {
    lifecycle.CancelResult.CANCELLED: "cancelled",
    lifecycle.CancelResult.REQUESTED: "cancel requested",
    lifecycle.CancelResult.ALREADY_REQUESTED: "already cancelling",
    lifecycle.CancelResult.ALREADY_ENDED: "already ended, nothing to cancel",
}


@operators_only
def bulk_cancel(request: HttpRequest) -> HttpResponse:
    selection = BulkSelection(request.POST)
    reason_form = forms.CancelForm(request.POST)
    if not selection.is_valid() or not reason_form.is_valid():
        problems = [
            str(error)
            for error in [*selection.errors.get("item", []), *reason_form.errors.get("reason", [])]
        ]
        messages.error(request, f"Nothing changed: {' '.join(problems) or 'choose tasks'}")
        return _back(request, selection, "dashboard:tasks")
    reason = reason_form.cleaned_data["reason"]
    outcomes: Counter[str] = Counter()
    for task_id in selection.cleaned_data["item"]:
        try:
            task = access.task_for(request.user, task_id, access.Action.CANCEL)
        except (access.TaskHidden, access.Refused):
            outcomes["not permitted or not found"] += 1
            continue
        try:
            outcome = lifecycle.task_request_cancel(
                task_id=task.pk, actor=actor_for(request.user, task), reason=reason
            )
        except lifecycle.LifecycleError:
            outcomes["moved on meanwhile"] += 1
            continue
        outcomes[_CANCEL_SUMMARY[outcome.result]] += 1
    messages.success(request, f"Bulk cancel: {_summary(outcomes)}.")
    return _back(request, selection, "dashboard:tasks")


@operators_only
def bulk_reconcile(request: HttpRequest) -> HttpResponse:
    selection = BulkSelection(request.POST)
    decision_form = forms.ReconcileForm(request.POST)
    if not selection.is_valid() or not decision_form.is_valid():
        problems = [
            f"{name}: {' '.join(map(str, errors))}"
            if name != "item"
            else " ".join(map(str, errors))
            for name, errors in {**selection.errors, **decision_form.errors}.items()
            if name != "next"
        ]
        messages.error(request, f"Nothing changed: {'; '.join(problems)}")
        return _back(request, selection, "dashboard:inbox")
    decision = decision_form.cleaned_data
    outcomes: Counter[str] = Counter()
    for value in selection.cleaned_data["item"]:
        try:
            effect = access.effect_for(
                request.user,
                int(value) if value.isdigit() and len(value) <= 18 else None,
                access.Action.RECONCILE,
            )
        except (access.TaskHidden, access.Refused):
            outcomes["not permitted or not found"] += 1
            continue
        try:
            lifecycle.task_reconcile_effect(
                effect_id=effect.pk,
                actor=actor_for(request.user, effect.task),
                decision=decision["decision"],
                note=decision["note"],
                external_ref=decision["external_ref"].strip(),
            )
        except lifecycle.LifecycleError:
            outcomes["already reconciled or moved on"] += 1
            continue
        outcomes[f"reconciled as {decision['decision'].replace('_', ' ')}"] += 1
    messages.success(request, f"Bulk reconcile: {_summary(outcomes)}.")
    return _back(request, selection, "dashboard:inbox")
