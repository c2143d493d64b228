"""REST API for a tenant's event destinations (issue 24): ``/api/v1/destinations`` lists and
creates them, ``/api/v1/destinations/{id}`` reads, changes and deletes one, ``…/deliveries``
is its delivery log and ``…/deliveries/{delivery_id}/redeliver`` sends a dead letter again.

Admins of a tenant manage its destinations; its operators read them and redeliver
(access.may_manage_destinations, access.may_see_deliveries). A destination of a tenant the
caller may not see is a 404. The secret is write-only: accepted on create and change, never
returned (``has_secret`` says whether one is set). A config a sink refuses is a 400 naming the
field."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import APIException, NotFound, PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from mcptasks import access, sinks
from mcptasks.models import Delivery, DeliveryState, Destination
from mcptasks.outbox import delivery as outbox_delivery
from mcptasks.outbox import destinations as service
from mcptasks.outbox.subscriptions import ALL_EVENTS
from mcptasks.restkit.errors import Conflict, Unprocessable, problems, sentence
from mcptasks.restkit.views import ApiView, TenantAdminView

User = get_user_model()
LOG_LIMIT = 100


class BadConfig(APIException):
    """A destination's config or secret that its kind refuses: 400, ``errors`` names the field."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_detail = "Invalid destination configuration"
    default_code = "invalid_config"


def _bad(exc: sinks.ConfigError) -> BadConfig:
    return BadConfig({exc.field: [sentence(exc.message)]})


class DestinationInputSerializer(serializers.Serializer):
    tenant = serializers.SlugField(required=False, help_text="default: the caller's tenant")
    name = serializers.CharField(max_length=100)
    kind = serializers.CharField(max_length=32, help_text="webhook, or another sink kind")
    config = serializers.DictField(help_text='the kind\'s settings, e.g. {"url": …}')
    secret = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        write_only=True,
        max_length=4000,
        trim_whitespace=True,
        help_text="write-only: e.g. a webhook's whsec_… signing secret; never returned",
    )
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=list(ALL_EVENTS)), min_length=1, max_length=20
    )
    owner = serializers.CharField(
        required=False,
        max_length=150,
        help_text="username whose view of a task the events carry (default: the caller)",
    )
    enabled = serializers.BooleanField(default=True)


class DestinationChangeSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100, required=False)
    config = serializers.DictField(required=False)
    secret = serializers.CharField(
        required=False,
        allow_blank=True,
        write_only=True,
        max_length=4000,
        help_text="write-only: a new secret replaces the old; omitted or empty keeps it",
    )
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=list(ALL_EVENTS)),
        min_length=1,
        max_length=20,
        required=False,
    )
    owner = serializers.CharField(required=False, max_length=150)
    enabled = serializers.BooleanField(required=False)


class RedeliverInputSerializer(serializers.Serializer):
    reason = serializers.CharField(
        required=False, allow_blank=True, max_length=2000, default="", help_text="audited"
    )


class DestinationSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    tenant = serializers.CharField(source="tenant.slug")
    name = serializers.CharField()
    kind = serializers.CharField()
    config = serializers.DictField()
    has_secret = serializers.BooleanField(help_text="the secret itself is never returned")
    events = serializers.ListField(child=serializers.CharField())
    owner = serializers.CharField(source="owner.username")
    enabled = serializers.BooleanField()
    audit_cursor = serializers.IntegerField(
        help_text="the last audit sequence taken into the audit stream"
    )
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class DeliverySerializer(serializers.Serializer):
    id = serializers.IntegerField()
    event_id = serializers.CharField()
    event_type = serializers.CharField()
    task_id = serializers.CharField()
    state = serializers.ChoiceField(choices=DeliveryState.choices)
    attempts = serializers.IntegerField()
    next_attempt_at = serializers.DateTimeField()
    last_error = serializers.CharField()
    first_seq = serializers.IntegerField(allow_null=True)
    last_seq = serializers.IntegerField(allow_null=True)
    created_at = serializers.DateTimeField()
    delivered_at = serializers.DateTimeField(allow_null=True)
    dead_at = serializers.DateTimeField(allow_null=True)
    redelivered_at = serializers.DateTimeField(allow_null=True)


def _visible(request: Request) -> Any:
    return Destination.objects.filter(
        tenant_id__in=access.destination_tenants(request.user)
    ).select_related("tenant", "owner")


def _destination(request: Request, destination_id: int) -> Destination:
    found = _visible(request).filter(pk=destination_id).first()
    if found is None:
        raise NotFound("Destination not found.")
    return found


def _owner(tenant_id: int, username: str | None) -> Any:
    if not username:
        return None
    owner = User.objects.filter(
        username=username, memberships__tenant_id=tenant_id, is_active=True
    ).first()
    if owner is None:
        raise BadConfig({"owner": [f"No member {username!r} in the destination's tenant."]})
    return owner


class DestinationListView(TenantAdminView):
    @extend_schema(
        operation_id="destinations_list",
        tags=["destinations"],
        summary="Event destinations",
        description="The destinations (webhooks, SIEM streams) of the tenants where the caller "
        "is an admin or an operator. Secrets are never returned.",
        responses={200: DestinationSerializer(many=True), **problems(403)},
    )
    def get(self, request: Request) -> Response:
        if not access.destination_tenants(request.user):
            raise PermissionDenied(
                "Only the tenant's admins and operators see its event destinations."
            )
        rows = _visible(request).order_by("tenant__slug", "name")
        return Response(DestinationSerializer(rows, many=True).data)

    @extend_schema(
        operation_id="destinations_create",
        tags=["destinations"],
        summary="Create an event destination",
        description="A destination of `kind` (e.g. `webhook`) receiving the subscribed "
        "`events` (task events and/or `audit`). The config is checked by the kind (400 naming "
        "the field); the secret is stored encrypted and never returned. Tenant admins; "
        'audited as destination.created ("secret changed", never the secret).',
        request=DestinationInputSerializer,
        responses={201: DestinationSerializer, **problems(400, 403, 404, 422)},
    )
    def post(self, request: Request) -> Response:
        data = self.body(DestinationInputSerializer)
        tenant = self.tenant(data.get("tenant"), access.may_manage_destinations)
        try:
            destination = service.create(
                tenant=tenant,
                actor=self.actor,
                created_by=request.user,
                name=data["name"],
                kind=data["kind"],
                config=data["config"],
                secret=data["secret"],
                events=data["events"],
                owner=_owner(tenant.pk, data.get("owner")),
                enabled=data["enabled"],
            )
        except sinks.ConfigError as exc:
            raise _bad(exc) from None
        return Response(DestinationSerializer(destination).data, status=201)


class DestinationDetailView(TenantAdminView):
    @extend_schema(
        operation_id="destinations_get",
        tags=["destinations"],
        summary="One event destination",
        responses={200: DestinationSerializer, **problems(404)},
    )
    def get(self, request: Request, destination_id: int) -> Response:
        return Response(DestinationSerializer(_destination(request, destination_id)).data)

    @extend_schema(
        operation_id="destinations_change",
        tags=["destinations"],
        summary="Change an event destination",
        description="Changes the fields given; a new `secret` replaces the stored one (omitted "
        "or empty: kept). `enabled: false` disables it (pending deliveries wait). Tenant "
        "admins; audited as destination.changed.",
        request=DestinationChangeSerializer,
        responses={200: DestinationSerializer, **problems(400, 403, 404, 422)},
    )
    def patch(self, request: Request, destination_id: int) -> Response:
        destination = _destination(request, destination_id)
        self.require(access.may_manage_destinations(request.user, destination.tenant_id))
        data = self.body(DestinationChangeSerializer)
        try:
            destination = service.update(
                destination=destination,
                actor=self.actor,
                name=data.get("name"),
                config=data.get("config"),
                secret=data.get("secret") or None,
                events=data.get("events"),
                owner=_owner(destination.tenant_id, data.get("owner")),
                enabled=data.get("enabled"),
            )
        except sinks.ConfigError as exc:
            raise _bad(exc) from None
        return Response(DestinationSerializer(destination).data)

    @extend_schema(
        operation_id="destinations_delete",
        tags=["destinations"],
        summary="Delete an event destination",
        description="Deletes it and its delivery log. Tenant admins; audited as "
        "destination.deleted.",
        responses={204: None, **problems(403, 404)},
    )
    def delete(self, request: Request, destination_id: int) -> Response:
        destination = _destination(request, destination_id)
        self.require(access.may_manage_destinations(request.user, destination.tenant_id))
        service.delete(destination=destination, actor=self.actor)
        return Response(status=204)


class DeliveryListView(ApiView):
    @extend_schema(
        operation_id="destinations_deliveries",
        tags=["destinations"],
        summary="A destination's delivery log",
        description="Its deliveries, newest first (at most 100), optionally in one state.",
        parameters=[
            OpenApiParameter("state", str, enum=[s.value for s in DeliveryState], required=False)
        ],
        responses={200: DeliverySerializer(many=True), **problems(404, 422)},
    )
    def get(self, request: Request, destination_id: int) -> Response:
        destination = _destination(request, destination_id)
        rows = Delivery.objects.filter(destination=destination)
        state = request.query_params.get("state")
        if state:
            if state not in DeliveryState.values:
                raise Unprocessable({"state": [f"Not a delivery state: {state[:40]!r}."]})
            rows = rows.filter(state=state)
        return Response(DeliverySerializer(rows.order_by("-id")[:LOG_LIMIT], many=True).data)


class RedeliverView(TenantAdminView):
    @extend_schema(
        operation_id="destinations_redeliver",
        tags=["destinations"],
        summary="Redeliver a dead-lettered delivery",
        description="Sends a dead-lettered delivery again, with the same event id (receivers "
        "de-duplicate on it); 409 unless it is dead. Admins and operators of the tenant; "
        "audited as destination.redelivered.",
        request=RedeliverInputSerializer,
        responses={200: DeliverySerializer, **problems(400, 403, 404, 409, 422)},
    )
    def post(self, request: Request, destination_id: int, delivery_id: int) -> Response:
        destination = _destination(request, destination_id)
        row = Delivery.objects.filter(destination=destination, pk=delivery_id).first()
        if row is None:
            raise NotFound("Delivery not found.")
        data = self.body(RedeliverInputSerializer)
        row.destination = destination
        try:
            row = outbox_delivery.redeliver(
                delivery=row, user=request.user, actor=self.actor, reason=data["reason"]
            )
        except outbox_delivery.NotDead:
            raise Conflict("Only a dead-lettered delivery may be redelivered.") from None
        return Response(DeliverySerializer(row).data)
