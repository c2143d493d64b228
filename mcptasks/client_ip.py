"""The client address of a request: ``REMOTE_ADDR``, unless that is a configured proxy.

``X-Forwarded-For`` is believed only as far as it was written by proxies listed in
``MCPTASKS_TRUSTED_PROXIES`` (addresses or networks; default none): walking it from the right,
each hop added by a trusted proxy is skipped and the first address that is not a trusted proxy
is the client. A client cannot choose its recorded address by sending the header itself.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from typing import Any

from django.conf import settings

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@lru_cache(maxsize=8)
def _networks(configured: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(item, strict=False) for item in configured)


def trusted_networks() -> tuple[Network, ...]:
    return _networks(tuple(settings.MCPTASKS_TRUSTED_PROXIES))


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def _trusted(address: Any, networks: tuple[Network, ...]) -> bool:
    return address is not None and any(address in network for network in networks)


def client_ip(request: Any) -> str:
    """The address to record (audit ``ip``) and to throttle logins by."""
    meta = getattr(request, "META", {})
    peer = str(meta.get("REMOTE_ADDR", "") or "")
    networks = trusted_networks()
    if not networks or not _trusted(_address(peer), networks):
        return peer
    hops = [hop.strip() for hop in str(meta.get("HTTP_X_FORWARDED_FOR", "")).split(",")]
    for hop in reversed([hop for hop in hops if hop]):
        address = _address(hop)
        if address is None:
            return peer  # a hop a trusted proxy could not have written: stop at that proxy
        if not _trusted(address, networks):
            return str(address)
        peer = str(address)
    return peer
