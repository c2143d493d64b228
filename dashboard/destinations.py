"""The dashboard's Destinations page (issue 24): a tenant's event destinations — list, create,
edit, disable, delete — with each one's delivery log and a Redeliver action on dead letters.

Admins of the tenant manage; its operators see the page and redeliver (access.
may_manage_destinations, may_see_deliveries); anyone else gets a 403, and a destination of a
tenant the user may not see is a 404. The secret field is write-only: it is never rendered,
not even back into a form that failed validation."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from dashboard.pages import actor_for, current_tenant, denied, page, render_page
from mcptasks import access, sinks
from mcptasks.models import Delivery, DeliveryState, Destination, Tenant
from mcptasks.outbox import delivery as outbox_delivery
from mcptasks.outbox import destinations as service
from mcptasks.outbox.subscriptions import AUDIT, TASK_EVENTS

User = get_user_model()
LOG_ROWS = 100
EVENT_CHOICES = [
    *((name, f"{name} — {text}") for name, text in TASK_EVENTS.items()),
    (AUDIT, "audit — every event of the tenant's audit chain, in chain order"),
]


class DestinationForm(forms.Form):
    name = forms.CharField(max_length=100)
    kind = forms.ChoiceField(label="Kind")
    config = forms.CharField(
        label="Configuration (JSON)",
        widget=forms.Textarea(attrs={"rows": 3, "class": "mono", "spellcheck": "false"}),
        help_text='The kind\'s settings, e.g. {"url": "https://hooks.example.com/mcptasks"}.',
    )
    secret = forms.CharField(
        label="Secret",
        required=False,
        max_length=4000,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Write-only: never shown again. A webhook's signing secret is whsec_ and "
        "base64. On edit, leave empty to keep the stored one.",
    )
    events = forms.MultipleChoiceField(
        choices=EVENT_CHOICES, widget=forms.CheckboxSelectMultiple, label="Events"
    )
    owner = forms.ChoiceField(
        label="Owner", help_text="Task events carry the task as this member sees it (redacted)."
    )
    enabled = forms.BooleanField(required=False, initial=True, label="Enabled")

    def __init__(self, *args: Any, tenant: Tenant, editing: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        kind = self.fields["kind"]
        assert isinstance(kind, forms.ChoiceField)
        kind.choices = [(k, f"{k} — {s.label}") for k, s in sinks.sinks().items()]
        if editing:
            kind.disabled = True
        owner = self.fields["owner"]
        assert isinstance(owner, forms.ChoiceField)
        owner.choices = [
            (str(pk), name)
            for pk, name in User.objects.filter(is_active=True, memberships__tenant=tenant)
            .distinct()
            .order_by("username")
            .values_list("pk", "username")
        ]

    def clean_config(self) -> dict[str, Any]:
        try:
            value = json.loads(self.cleaned_data["config"])
        except ValueError:
            raise forms.ValidationError("Not valid JSON.") from None
        if not isinstance(value, dict):
            raise forms.ValidationError('A JSON object, e.g. {"url": "https://…"}.')
        return value


def _form_error(form: DestinationForm, exc: sinks.ConfigError) -> None:
    """Put a sink's refusal on the form field it names (the config's own keys on config)."""
    field = exc.field if exc.field in form.fields else "config"
    prefix = "" if field == exc.field else f"{exc.field}: "
    form.add_error(field, f"{prefix}{exc.message[:1].upper()}{exc.message[1:]}.")


def _owner(tenant: Tenant, owner_id: str) -> Any:
    return User.objects.filter(pk=int(owner_id), memberships__tenant=tenant, is_active=True).first()


def _visible(request: HttpRequest) -> Any:
    return Destination.objects.filter(
        tenant_id__in=access.destination_tenants(request.user)
    ).select_related("tenant", "owner")


@page
def destination_list(request: HttpRequest) -> HttpResponse:
    """The current tenant's destinations; an admin's form to create one."""
    user = request.user
    tenant = current_tenant(request)
    if tenant is None or not access.may_see_deliveries(user, tenant.pk):
        return denied(request, "only the tenant's admins and operators see its event destinations")
    may_manage = bool(access.may_manage_destinations(user, tenant.pk))
    form = DestinationForm(
        request.POST if request.method == "POST" else None,
        tenant=tenant,
        initial={
            "kind": "webhook",
            "config": '{"url": "https://"}',
            "owner": str(user.pk),
            "enabled": True,
        },
    )
    status = 200
    if request.method == "POST":
        if not may_manage:
            return denied(request, "only the tenant's admins manage its event destinations")
        if form.is_valid():
            data = form.cleaned_data
            try:
                created = service.create(
                    tenant=tenant,
                    actor=actor_for(user),
                    created_by=user,
                    name=data["name"],
                    kind=data["kind"],
                    config=data["config"],
                    secret=data["secret"],
                    events=data["events"],
                    owner=_owner(tenant, data["owner"]),
                    enabled=data["enabled"],
                )
            except sinks.ConfigError as exc:
                _form_error(form, exc)
            else:
                messages.success(request, f"Created destination {created.name}.")
                return redirect("dashboard:destination", created.pk)
        status = 422
    rows = list(Destination.objects.filter(tenant=tenant).select_related("owner").order_by("name"))
    counts: dict[int, dict[str, int]] = {}
    for destination_id, state in Delivery.objects.filter(
        destination__tenant=tenant, state__in=[DeliveryState.PENDING, DeliveryState.DEAD]
    ).values_list("destination_id", "state"):
        counts.setdefault(destination_id, {}).setdefault(state, 0)
        counts[destination_id][state] += 1
    for row in rows:
        row.pending_count = counts.get(row.pk, {}).get(DeliveryState.PENDING, 0)  # type: ignore[attr-defined]
        row.dead_count = counts.get(row.pk, {}).get(DeliveryState.DEAD, 0)  # type: ignore[attr-defined]
    response = render_page(
        request,
        "dashboard/destinations.html",
        {"tenant": tenant, "destinations": rows, "form": form, "may_manage": may_manage},
        status=status,
    )
    response["Cache-Control"] = "no-store"
    return response


def _destination_or_404(request: HttpRequest, destination_id: int) -> Destination:
    found = _visible(request).filter(pk=destination_id).first()
    if found is None:
        raise Http404("No such destination")
    return found


@page
def destination_detail(request: HttpRequest, destination_id: int) -> HttpResponse:
    """One destination: an admin's edit form, and its delivery log (newest first)."""
    destination = _destination_or_404(request, destination_id)
    user = request.user
    may_manage = bool(access.may_manage_destinations(user, destination.tenant_id))
    initial = {
        "name": destination.name,
        "kind": destination.kind,
        "config": json.dumps(destination.config, indent=1),
        "events": list(destination.events),
        "owner": str(destination.owner_id),
        "enabled": destination.enabled,
    }
    form = DestinationForm(
        request.POST if request.method == "POST" else None,
        tenant=destination.tenant,
        editing=True,
        initial=initial,
    )
    status = 200
    if request.method == "POST":
        if not may_manage:
            return denied(request, "only the tenant's admins manage its event destinations")
        if form.is_valid():
            data = form.cleaned_data
            try:
                service.update(
                    destination=destination,
                    actor=actor_for(user),
                    name=data["name"],
                    config=data["config"],
                    secret=data["secret"] or None,
                    events=data["events"],
                    owner=_owner(destination.tenant, data["owner"]),
                    enabled=data["enabled"],
                )
            except sinks.ConfigError as exc:
                _form_error(form, exc)
            else:
                messages.success(request, f"Saved destination {destination.name}.")
                return redirect("dashboard:destination", destination.pk)
        status = 422
    state = request.GET.get("state", "")
    log = Delivery.objects.filter(destination=destination)
    if state in DeliveryState.values:
        log = log.filter(state=state)
    response = render_page(
        request,
        "dashboard/destination_detail.html",
        {
            "destination": destination,
            "form": form,
            "may_manage": may_manage,
            "deliveries": list(log.order_by("-id")[:LOG_ROWS]),
            "state": state,
            "states": DeliveryState.values,
        },
        status=status,
    )
    response["Cache-Control"] = "no-store"
    return response


@page
@require_POST
def destination_delete(request: HttpRequest, destination_id: int) -> HttpResponse:
    destination = _destination_or_404(request, destination_id)
    allowed = access.may_manage_destinations(request.user, destination.tenant_id)
    if not allowed:
        return denied(request, allowed.reason)
    service.delete(destination=destination, actor=actor_for(request.user))
    messages.success(request, f"Deleted destination {destination.name}.")
    return redirect("dashboard:destinations")


@page
@require_POST
def delivery_redeliver(request: HttpRequest, destination_id: int, delivery_id: int) -> HttpResponse:
    destination = _destination_or_404(request, destination_id)
    row = Delivery.objects.filter(destination=destination, pk=delivery_id).first()
    if row is None:
        raise Http404("No such delivery")
    row.destination = destination
    try:
        outbox_delivery.redeliver(delivery=row, user=request.user, actor=actor_for(request.user))
    except outbox_delivery.NotDead:
        messages.error(request, "Nothing changed: only a dead-lettered delivery is redelivered.")
    else:
        messages.success(request, f"Redelivering {row.event_type} {row.event_id}.")
    return redirect("dashboard:destination", destination.pk)
