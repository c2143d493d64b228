"""Creating, changing and deleting a tenant's destinations, audited in the same transaction.

Authorizing is the caller's (``access.may_manage_destinations``). The secret is validated,
encrypted and stored; the audit event says only whether it changed ("secret changed")."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.utils import timezone

from audit.record import Actor, record
from mcptasks import sinks
from mcptasks.models import Membership, Tenant
from mcptasks.outbox import crypto, subscriptions, writer
from mcptasks.outbox.models import Destination
from mcptasks.outbox.subscriptions import ALL_EVENTS, AUDIT
from mcptasks.sinks import ConfigError


def clean(
    *, kind: str, config: Any, secret: str | None, events: Iterable[Any], had_secret: bool = False
) -> tuple[dict[str, Any], str | None, list[str]]:
    """The validated config, secret (None: unchanged) and events; raise :class:`ConfigError`
    naming the field."""
    try:
        sink = sinks.get(kind)
    except KeyError:
        known = ", ".join(sinks.sinks()) or "none"
        raise ConfigError("kind", f"unknown kind {kind!r} (this build has: {known})") from None
    if not isinstance(config, dict):
        raise ConfigError("config", "must be a JSON object")
    cleaned = sink.clean_config(config)
    if secret is not None:
        secret = secret.strip()
        cleaner = getattr(sink, "clean_secret", None)
        if secret and cleaner is not None:
            secret = cleaner(secret)
    has_secret = bool(secret) if secret is not None else had_secret
    if sink.secret_required and not has_secret:
        raise ConfigError("secret", f"a {sink.label} needs a {sink.secret_label or 'secret'}")
    chosen = []
    for event in events:
        if event not in ALL_EVENTS:
            raise ConfigError("events", f"unknown event type {event!r}")
        if event not in chosen:
            chosen.append(event)
    if not chosen:
        raise ConfigError("events", "subscribe to at least one event type (or audit)")
    return cleaned, secret, chosen


def _check_owner(tenant: Tenant, owner: Any) -> None:
    if owner is None or not Membership.objects.filter(tenant=tenant, user=owner).exists():
        raise ConfigError("owner", "the owner is a member of the destination's tenant")


def _audit_data(destination: Destination, **extra: Any) -> dict[str, Any]:
    """What the audit trail keeps of a destination: never its secret."""
    return {
        "destination_id": destination.pk,
        "name": destination.name,
        "kind": destination.kind,
        "config": destination.config,
        "events": list(destination.events),
        "owner": destination.owner.get_username(),
        "enabled": destination.enabled,
        **extra,
    }


def _record(action: str, destination: Destination, actor: Actor, **extra: Any) -> None:
    record(
        action=action,
        actor=actor,
        tenant_id=destination.tenant_id,
        tenant_slug=destination.tenant.slug,
        data=_audit_data(destination, **extra),
    )


def create(
    *,
    tenant: Tenant,
    actor: Actor,
    created_by: Any,
    name: str,
    kind: str,
    config: Any,
    secret: str,
    events: Iterable[str],
    owner: Any = None,
    enabled: bool = True,
) -> Destination:
    """A new destination; audited as ``destination.created``. Raises :class:`ConfigError`."""
    owner = owner or created_by
    name = name.strip()
    if not name:
        raise ConfigError("name", "is required")
    cleaned, secret_value, chosen = clean(kind=kind, config=config, secret=secret, events=events)
    _check_owner(tenant, owner)
    with transaction.atomic():
        if Destination.objects.filter(tenant=tenant, name=name).exists():
            raise ConfigError("name", f"the tenant already has a destination named {name!r}")
        destination = Destination.objects.create(
            tenant=tenant,
            name=name,
            kind=kind,
            config=cleaned,
            secret_encrypted=crypto.encrypt(secret_value or ""),
            events=chosen,
            owner=owner,
            enabled=enabled,
            audit_cursor=writer.audit_start(tenant.slug) if AUDIT in chosen else 0,
            created_by=created_by,
        )
        destination.tenant = tenant
        _record("destination.created", destination, actor, secret_changed=bool(secret_value))
        transaction.on_commit(lambda: subscriptions.forget(tenant.pk))
    subscriptions.forget(tenant.pk)
    return destination


def update(
    *,
    destination: Destination,
    actor: Actor,
    name: str | None = None,
    config: Any = None,
    secret: str | None = None,
    events: Iterable[str] | None = None,
    owner: Any = None,
    enabled: bool | None = None,
) -> Destination:
    """Change what is given (``secret`` None: kept; a new secret replaces it); audited as
    ``destination.changed`` with the fields that changed. Raises :class:`ConfigError`."""
    cleaned, secret_value, chosen = clean(
        kind=destination.kind,
        config=destination.config if config is None else config,
        secret=secret or None,
        events=destination.events if events is None else events,
        had_secret=destination.has_secret,
    )
    fields: dict[str, Any] = {}
    if name is not None and name.strip() != destination.name:
        if not name.strip():
            raise ConfigError("name", "is required")
        if (
            Destination.objects.filter(tenant_id=destination.tenant_id, name=name.strip())
            .exclude(pk=destination.pk)
            .exists()
        ):
            raise ConfigError("name", f"the tenant already has a destination named {name!r}")
        fields["name"] = name.strip()
    if cleaned != destination.config:
        fields["config"] = cleaned
    if chosen != list(destination.events):
        fields["events"] = chosen
        if AUDIT in chosen and AUDIT not in destination.events:
            fields["audit_cursor"] = writer.audit_start(destination.tenant.slug)
    if owner is not None and owner.pk != destination.owner_id:
        _check_owner(destination.tenant, owner)
        fields["owner"] = owner
    if enabled is not None and enabled != destination.enabled:
        fields["enabled"] = enabled
    secret_changed = bool(secret_value)
    if secret_changed:
        fields["secret_encrypted"] = crypto.encrypt(secret_value or "")
    if not fields:
        return destination
    with transaction.atomic():
        for field, value in fields.items():
            setattr(destination, field, value)
        destination.updated_at = timezone.now()
        destination.save(update_fields=[*fields, "updated_at"])
        changed = sorted(f for f in fields if f not in ("secret_encrypted", "audit_cursor"))
        _record(
            "destination.changed",
            destination,
            actor,
            changed=changed,
            secret_changed=secret_changed,
        )
        tenant_id = destination.tenant_id
        transaction.on_commit(lambda: subscriptions.forget(tenant_id))
    subscriptions.forget(destination.tenant_id)
    return destination


def delete(*, destination: Destination, actor: Actor) -> None:
    """Delete the destination and its delivery log; audited as ``destination.deleted``."""
    tenant_id = destination.tenant_id
    with transaction.atomic():
        _record("destination.deleted", destination, actor)
        Destination.objects.filter(pk=destination.pk).delete()
        transaction.on_commit(lambda: subscriptions.forget(tenant_id))
    subscriptions.forget(tenant_id)
