"""Where an outbound call may go: a URL parsed one way by every caller (image URLs, base URLs,
redirects), its host resolved here, and each address checked against the private-address policy
(ALLOW_PRIVATE_UPSTREAMS, ALLOW_LOOPBACK_UPSTREAMS, PRIVATE_UPSTREAM_ALLOWLIST). The client in
`gateway.connections.http` then connects to the very address checked."""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

import httpx2 as httpx
from django.conf import settings

from ragmux.core.errors import UpstreamFailed

_EXTRA_BLOCKED = [ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("100.64.0.0/10")]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class UpstreamBlocked(UpstreamFailed):
    """The upstream resolves to an address the SSRF guard refuses."""

    code = "private_upstream"


def unreachable(message: str, *, retryable: bool) -> UpstreamFailed:
    """The call did not produce a usable HTTP response (transport, redirect)."""
    failure = UpstreamFailed(message, code="upstream_unreachable", retryable=retryable)
    # The message names the provider's address and what to check there: the operator's to read
    # (the request log, the connection's Test), not a key holder's.
    failure.client_message = "upstream unreachable"
    return failure


class InvalidUrl(ValueError):
    """A URL that is not one an outbound call may be made to; the message says why."""


# A host whose last label is a number is an IPv4 address to a URL parser (WHATWG), however it is
# spelt: 0177.0.0.1, 0x7f.1, 2130706433 and 127.1 all reach 127.0.0.1 through some resolvers.
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$", re.IGNORECASE)
# Nothing below U+0021 and no DEL belongs in a URL: a NUL or a newline would split it elsewhere.
_CONTROL = re.compile(r"[\x00-\x20\x7f]")


@dataclass(frozen=True)
class ParsedUrl:
    parts: SplitResult
    host: str  # as the guard and the connection use it: IPv6 without brackets, lower case
    port: int  # the URL's port, or its scheme's default


def parse_url(url: str) -> ParsedUrl:
    """An http(s) URL split into what every caller checks, refused (InvalidUrl) unless each part
    means one thing to every parser it meets: an IPv4 address only in its canonical dotted form
    (no octal, hexadecimal, leading zeros, short forms or values over 255), an IPv6 address the
    standard library reads, with no zone, and a port in range. One rule for image URLs, base
    URLs and redirects alike."""
    if _CONTROL.search(url):
        raise InvalidUrl("a URL must not hold spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidUrl(f"not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidUrl("not an http(s) URL with a host")
    host = parts.hostname
    if "[" in parts.netloc:
        try:
            address = ipaddress.IPv6Address(host)
        except ValueError:
            raise InvalidUrl(f'"{host}" is not a valid IPv6 address') from None
        if address.scope_id is not None:
            raise InvalidUrl("an IPv6 address in a URL must not name a zone")
    elif _NUMERIC_LABEL.match(host.rstrip(".").rsplit(".", 1)[-1]):
        try:
            canonical = str(ipaddress.IPv4Address(host))
        except ValueError:
            canonical = None
        if canonical != host:
            raise InvalidUrl(f'"{host}" is not an IPv4 address in its dotted decimal form')
    try:
        httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise InvalidUrl(f"not a valid URL ({exc})") from None
    return ParsedUrl(parts=parts, host=host, port=port or (443 if parts.scheme == "https" else 80))


def blocked_message(host: str) -> str:
    return (
        f'upstream host "{host}" resolves to a private or local address; set '
        "ALLOW_PRIVATE_UPSTREAMS=true or add it to PRIVATE_UPSTREAM_ALLOWLIST (loopback alone: "
        "ALLOW_LOOPBACK_UPSTREAMS=true) in the server's environment (deploy/.env under Docker Compose) "
        "and restart ragmux to apply it"
    )


def is_private_address(address: Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return (
        not address.is_global
        or address.is_multicast
        or any(address in network for network in _EXTRA_BLOCKED if network.version == address.version)
    )


def _loopback_allowed(address: Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return settings.ALLOW_LOOPBACK_UPSTREAMS and address.is_loopback


def _allowlisted(host: str, address: Address) -> bool:
    for entry in settings.PRIVATE_UPSTREAM_ALLOWLIST:
        if entry == host.lower():
            return True
        try:
            if address in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


def resolve(host: str, port: int) -> list[Address]:
    try:
        return [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise unreachable(
            f"The host {host} cannot be found ({exc.strerror}) — check the spelling of the base URL "
            "and that this server's DNS knows the host",
            retryable=True,
        ) from None
    seen: list[Address] = []
    for info in infos:
        address = ipaddress.ip_address(info[4][0].split("%")[0])
        if address not in seen:
            seen.append(address)
    return seen


def checked_addresses(host: str, port: int) -> list[Address]:
    """The addresses a call to ``host`` may use; raises UpstreamBlocked if none is allowed."""
    addresses = resolve(host, port)
    if settings.ALLOW_PRIVATE_UPSTREAMS:
        return addresses
    allowed = [a for a in addresses if not is_private_address(a) or _loopback_allowed(a) or _allowlisted(host, a)]
    if not allowed:
        raise UpstreamBlocked(blocked_message(host))
    return allowed


def refusal(url: str) -> str | None:
    """Why the guard would refuse a call to ``url`` under the settings running now; None when
    it would not (or when the host does not resolve here: the call itself will say so)."""
    parts = urlsplit(url)
    try:
        checked_addresses(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
    except UpstreamBlocked as exc:
        return exc.message
    except UpstreamFailed:
        return None
    return None


# The addresses a call to (host, port) may use, raising when none is allowed: checked_addresses
# for provider calls; a caller with a stricter policy (gateway.connections.images) passes its own.
Guard = Callable[[str, int], list[Address]]


def url_is_private(url: str) -> bool:
    """True when the URL's host resolves only to private addresses (recorded on connections)."""
    parts = urlsplit(url)
    try:
        addresses = resolve(parts.hostname or "", parts.port or 443)
    except UpstreamFailed:
        return False
    return bool(addresses) and all(is_private_address(a) for a in addresses)
