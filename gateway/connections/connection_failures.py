"""A failed connection to an upstream, in words: what it means and what to check, the one
wording wherever it is shown (a connection's Test, an API error, a document's failure)."""

from __future__ import annotations

import errno
import re
import ssl
from urllib.parse import urlsplit

import httpx2 as httpx

_ERRNO_IN_TEXT = re.compile(r"\[Errno (-?\d+)\]")
# Failures that mean the address answered but nothing there takes the connection, or that it
# cannot be reached at all.
_REFUSED = {errno.ECONNREFUSED}
_NO_ROUTE = {errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN, errno.EHOSTDOWN}
_DROPPED = {errno.ECONNRESET, errno.ECONNABORTED, errno.EPIPE}
# What OpenSSL says when the other end does not speak TLS at all (an http:// server called by an
# https:// URL).
_NOT_TLS = ("wrong version number", "record layer failure", "packet length too long", "unknown protocol")


def _causes(exc: BaseException):
    """``exc`` and what it was raised from, innermost last."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _errno_of(exc: BaseException) -> int | None:
    for cause in _causes(exc):
        if isinstance(cause, OSError) and cause.errno:
            return cause.errno
        found = _ERRNO_IN_TEXT.search(str(cause))
        if found:
            return int(found.group(1))
    return None


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{parts.hostname}:{port}"


def connection_failure_message(exc: BaseException, url: str) -> str:
    """What a failed connection to ``url`` means and what to check, in words: the one wording of
    a transport failure, wherever it is shown (a connection's Test, an API error, a document's
    failure). ``exc`` is the transport's exception (its causes are read too); only the URL's
    origin is named, never its path."""
    origin, host = origin_of(url), urlsplit(url).hostname
    text = " ".join(str(cause) for cause in _causes(exc)).lower()
    code = _errno_of(exc)
    if isinstance(exc, httpx.ConnectTimeout):
        return (
            f"{origin} did not accept a connection in time — check the base URL and that no firewall drops the traffic"
        )
    if code in _REFUSED or "connection refused" in text:
        return f"Nothing is listening at {origin} — check the base URL and that the server is running"
    if code in _NO_ROUTE:
        return f"No network route to {host} — check the base URL and that this server's network can reach it"
    if any(isinstance(cause, ssl.SSLCertVerificationError) for cause in _causes(exc)) or "certificate" in text:
        return (
            f"The TLS certificate of {host} was not accepted — check the host name in the base URL "
            "and that the server's certificate is valid"
        )
    if any(sign in text for sign in _NOT_TLS):
        return f"{origin} does not speak TLS — check whether the base URL should start with http://"
    if code in _DROPPED or isinstance(exc, httpx.RemoteProtocolError) or "disconnected" in text:
        return (
            f"{origin} closed the connection without an HTTP answer — check that the base URL's scheme "
            "(http or https) and port are the API's"
        )
    return f"The connection to {origin} failed ({exc or type(exc).__name__}) — check the base URL"
