"""The outbox's gauges for /metrics, read from the database at scrape time (every process
reports the same figures): backlog, dead letters and lag per destination kind."""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from mcptasks.outbox.models import Delivery, DeliveryState, Destination
from mcptasks.outbox.subscriptions import AUDIT


def gauges() -> Iterator[GaugeMetricFamily]:
    now = timezone.now()
    by_state = GaugeMetricFamily(
        "mcptasks_outbox_deliveries",
        "Deliveries by destination kind and state (pending, delivering, dead)",
        labels=["kind", "state"],
    )
    lag = GaugeMetricFamily(
        "mcptasks_outbox_lag_seconds",
        "Age of the oldest undelivered (pending or delivering) row, by destination kind",
        labels=["kind"],
    )
    open_states = [DeliveryState.PENDING, DeliveryState.DELIVERING, DeliveryState.DEAD]
    oldest: dict[str, float] = {}
    for kind, state, count, first in (
        Delivery.objects.filter(state__in=open_states)
        .values_list("destination__kind", "state")
        .annotate(n=Count("pk"), oldest=Min("created_at"))
        .order_by()
    ):
        by_state.add_metric([kind, state], count)
        if state != DeliveryState.DEAD and first is not None:
            age = (now - first).total_seconds()
            oldest[kind] = max(oldest.get(kind, 0.0), age)
    for kind in sorted(set(Destination.objects.values_list("kind", flat=True))):
        lag.add_metric([kind], oldest.get(kind, 0.0))
    yield by_state
    yield lag
    yield _audit_lag()


def _audit_lag() -> GaugeMetricFamily:
    """Audit events of a chain not yet taken into a delivery, by destination kind."""
    from audit.chain import chain_for_tenant
    from audit.models import ChainHead

    family = GaugeMetricFamily(
        "mcptasks_outbox_audit_lag_events",
        "Audit events behind the chain head, summed over audit streams of each kind",
        labels=["kind"],
    )
    streams = [
        (kind, slug, cursor)
        for kind, slug, cursor, events in Destination.objects.filter(enabled=True).values_list(
            "kind", "tenant__slug", "audit_cursor", "events"
        )
        if AUDIT in (events or ())
    ]
    heads = dict(
        ChainHead.objects.filter(
            chain__in={chain_for_tenant(slug) for _, slug, _ in streams}
        ).values_list("chain", "seq")
    )
    behind: dict[str, int] = {}
    for kind, slug, cursor in streams:
        behind[kind] = behind.get(kind, 0) + max(0, heads.get(chain_for_tenant(slug), 0) - cursor)
    for kind, count in sorted(behind.items()):
        family.add_metric([kind], count)
    return family
