"""Strict readers for settings that come from the environment.

Every reader raises :class:`ConfigError` naming the variable when a value is malformed, so a
typo stops start-up with a precise message instead of running with a silently wrong value.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class ConfigError(Exception):
    """A setting in the environment is missing or malformed."""


def _raw(name: str, environ: Mapping[str, str] | None) -> str | None:
    value = (environ if environ is not None else os.environ).get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def env_str(name: str, default: str | None = None, *, environ: Mapping[str, str] | None = None) -> str | None:
    value = _raw(name, environ)
    return default if value is None else value


def env_int(
    name: str,
    default: int,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    value = _raw(name, environ)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"{name}: {value!r} is not a whole number") from None
    if minimum is not None and number < minimum:
        raise ConfigError(f"{name}: {number} is below the minimum of {minimum}")
    if maximum is not None and number > maximum:
        raise ConfigError(f"{name}: {number} is above the maximum of {maximum}")
    return number


def env_bool(name: str, default: bool, *, environ: Mapping[str, str] | None = None) -> bool:
    value = _raw(name, environ)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigError(f"{name}: {value!r} is not a boolean (use true or false)")


def parse_duration(text: str) -> float:
    """Seconds in ``90``, ``90s``, ``5m``, ``1h`` or ``500ms``; ValueError otherwise."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(text)
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]


def env_duration(
    name: str,
    default: float | None,
    *,
    minimum: float | None = None,
    environ: Mapping[str, str] | None = None,
) -> float | None:
    value = _raw(name, environ)
    if value is None:
        return default
    try:
        seconds = parse_duration(value)
    except ValueError:
        raise ConfigError(f"{name}: {value!r} is not a duration (use e.g. 90, 90s or 5m)") from None
    if minimum is not None and seconds < minimum:
        raise ConfigError(f"{name}: {value} is shorter than the minimum of {minimum:g}s")
    return seconds


def env_list(name: str, *, environ: Mapping[str, str] | None = None) -> list[str]:
    value = _raw(name, environ)
    if value is None:
        return []
    return [item.strip() for item in value.split(",") if item.strip()]


def env_host_allowlist(name: str, *, environ: Mapping[str, str] | None = None) -> list[str]:
    """Hostnames, IP literals and CIDRs; a malformed network is refused here, not at call time."""
    entries = env_list(name, environ=environ)
    for entry in entries:
        if "/" in entry:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ConfigError(f"{name}: {entry!r} is not a valid CIDR") from None
    return [entry.lower() for entry in entries]


def env_networks(name: str, *, environ: Mapping[str, str] | None = None) -> list[IPNetwork]:
    """IP networks in CIDR notation (a bare address is its own /32 or /128). A network with host
    bits set (``10.0.0.1/8``) is refused: it is most likely a typo for another network."""
    networks = []
    for entry in env_list(name, environ=environ):
        try:
            networks.append(ipaddress.ip_network(entry))
        except ValueError:
            raise ConfigError(f"{name}: {entry!r} is not a network in CIDR notation (e.g. 10.0.0.0/8)") from None
    return networks


def env_choice(name: str, default: str, choices: tuple[str, ...], *, environ: Mapping[str, str] | None = None) -> str:
    value = _raw(name, environ)
    if value is None:
        return default
    if value.lower() not in choices:
        raise ConfigError(f"{name}: {value!r} is not one of {', '.join(choices)}")
    return value.lower()


def env_identifier(name: str, default: str, *, environ: Mapping[str, str] | None = None) -> str:
    """A lower-cased SQL identifier (a name in a PostgreSQL catalogue, say): letters, digits and
    underscores, at most 63 characters, not starting with a digit."""
    value = _raw(name, environ)
    if value is None:
        return default
    if not _IDENTIFIER.match(value.lower()):
        raise ConfigError(f"{name}: {value!r} is not a name (letters, digits and _, at most 63 characters)")
    return value.lower()


def env_address(name: str, *, environ: Mapping[str, str] | None = None) -> tuple[str, int] | None:
    """A ``host:port`` to listen on (``[v6]:port`` for IPv6): the host an IP address or
    ``localhost``, the port 1-65535."""
    value = _raw(name, environ)
    if value is None:
        return None
    host, colon, port = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not colon or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(f"{name}: {value!r} is not host:port (e.g. 127.0.0.1:9108)")
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ConfigError(f"{name}: {host!r} is not an IP address or localhost") from None
    return host, int(port)
