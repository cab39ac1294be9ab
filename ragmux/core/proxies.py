"""Which proxy headers to believe: the client's address, and whether the request came over https.

Anyone can send X-Forwarded-For, so it is read only when the operator says a proxy is in front
(TRUST_PROXY_HEADERS). With TRUSTED_PROXY_CIDRS the proxies are named too: the headers count
only on a connection from one of them, and X-Forwarded-For is walked from the right, each proxy
having appended the address it saw, until an address that is not one of the proxies: the
client. Entries left of it are the client's to invent.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _address(text: str) -> Address | None:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def _is_trusted_proxy(address: Address | None) -> bool:
    if address is None:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in settings.TRUSTED_PROXY_CIDRS)


def _forwarded_for(request) -> list[str]:
    header = request.META.get("HTTP_X_FORWARDED_FOR", "")
    return [part.strip() for part in header.split(",") if part.strip()]


def proxy_headers_believed(request) -> bool:
    """Whether this request's proxy headers (X-Forwarded-*, X-Real-IP) are the proxy's."""
    if not settings.TRUST_PROXY_HEADERS:
        return False
    return not settings.TRUSTED_PROXY_CIDRS or _is_trusted_proxy(_address(request.META.get("REMOTE_ADDR", "")))


def client_address(request) -> str:
    """The address of the caller, as the proxies in front report it when they are believed."""
    peer = request.META.get("REMOTE_ADDR", "")
    if not proxy_headers_believed(request):
        return peer
    forwarded = _forwarded_for(request)
    if not settings.TRUSTED_PROXY_CIDRS:
        # The last entry is the one our proxy appended.
        return forwarded[-1] if forwarded else (request.META.get("HTTP_X_REAL_IP", "").strip() or peer)
    if not forwarded:
        real_ip = _address(request.META.get("HTTP_X_REAL_IP", ""))
        return str(real_ip) if real_ip is not None else peer
    nearest = peer
    for entry in reversed(forwarded):
        address = _address(entry)
        if address is None:
            # A proxy we trust wrote something that is not an address: the nearest proxy is the
            # furthest hop known for sure.
            return nearest
        if not _is_trusted_proxy(address):
            return str(address)
        nearest = str(address)
    # Every hop is one of ours (a request from inside): the furthest one is the caller.
    return nearest
