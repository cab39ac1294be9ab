"""Who may read the metrics, and where they are served.

The metrics tell per-project usage, spend and error rates, so they are off unless
``METRICS_ENABLED``. When on, they are served either on the public port behind the bearer
``METRICS_TOKEN``, or only on a listener of their own (``METRICS_LISTEN``), which the public port
never serves (its `/metrics` answers 404 then). A listener on a non-loopback address needs the
token too. A setting that would publish the metrics to anyone stops the start-up instead.

Pure: settings.py calls :func:`check` before Django is set up.
"""

from __future__ import annotations

import hmac
import ipaddress

from prometheus_client import CONTENT_TYPE_LATEST

from ragmux.core.env import ConfigError

# Shorter tokens are guessable by a scraper-shaped brute force.
MIN_TOKEN_LENGTH = 16
PATH = "/metrics"
RESPONSE_HEADERS = {"Content-Type": CONTENT_TYPE_LATEST, "Cache-Control": "no-store"}
REFUSED_TEXT = "the metrics need the bearer METRICS_TOKEN\n"


def is_loopback(host: str) -> bool:
    return host == "localhost" or ipaddress.ip_address(host).is_loopback


def check(*, enabled: bool, token: str | None, listen: tuple[str, int] | None, public_port: int) -> None:
    """Raises ConfigError for settings that are contradictory or would serve the metrics openly."""
    if not enabled:
        for name, value in (("METRICS_TOKEN", token), ("METRICS_LISTEN", listen)):
            if value is not None:
                raise ConfigError(f"{name}: set, but METRICS_ENABLED is not true (the metrics are off)")
        return
    if token is not None and (len(token) < MIN_TOKEN_LENGTH or any(c.isspace() for c in token)):
        raise ConfigError(f"METRICS_TOKEN: at least {MIN_TOKEN_LENGTH} characters, no spaces")
    if listen is not None and listen[1] == public_port:
        raise ConfigError(f"METRICS_LISTEN: port {listen[1]} is the public PORT; give the metrics a port of their own")
    if token is None and (listen is None or not is_loopback(listen[0])):
        raise ConfigError(
            "METRICS_ENABLED: /metrics would publish per-project usage and spend unauthenticated; "
            "set METRICS_TOKEN, or METRICS_LISTEN on a loopback address (e.g. 127.0.0.1:9108)"
        )


def on_public_port(*, enabled: bool, token: str | None, listen: tuple[str, int] | None) -> bool:
    """Whether the public port serves `/metrics`: only when it is on, behind a token, and no
    listener of its own serves it."""
    return enabled and token is not None and listen is None


def bearer_matches(authorization: str, token: str) -> bool:
    """Whether an ``Authorization`` header carries ``token``, compared in constant time."""
    scheme, _, presented = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(), token.encode())


def refusal(*, authorization: str, token: str | None) -> int | None:
    """The status a scrape is refused with (401 without the token), None when it may read."""
    if token is not None and not bearer_matches(authorization, token):
        return 401
    return None
