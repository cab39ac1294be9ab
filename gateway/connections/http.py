"""The one outbound HTTP path for every provider call.

It resolves the upstream host itself, refuses private, loopback, link-local and metadata
addresses (unless allow-listed), and then connects to the very address it checked, so a DNS
answer that changes between check and connect cannot redirect the call. Redirects are
followed by hand (at most three, same host, never from https to http) and every hop is
checked again. Responses are read with a size cap.

:func:`request` is the blocking form; :func:`open_stream` is the async form the client API
uses to relay long streamed answers without holding a thread.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

# httpx2, pydantic's continuation of httpx (same API): httpx's connection pool rescans every
# connection, polling each idle socket, on every request it queues and releases, so its CPU per
# request grows with the connections it holds; httpx2's does not (docs/benchmarks.md, issue 43).
import httpx2 as httpx
from django.conf import settings

# The rules httpx reads the proxy variables by (NO_PROXY's patterns included), applied per call.
from httpx2._utils import URLPattern, get_environment_proxies

from gateway.connections.connection_failures import connection_failure_message, origin_of
from gateway.connections.guard import Guard, InvalidUrl, checked_addresses, parse_url, unreachable
from ragmux.core.errors import UpstreamFailed, UpstreamTimeout
from ragmux.core.units import MIB

MAX_REDIRECTS = 3


class ResponseTooLarge(UpstreamFailed):
    """The response is larger than the caller's cap."""

    code = "upstream_unreachable"


def _too_large(limit: int) -> ResponseTooLarge:
    return ResponseTooLarge(f"upstream response is larger than {limit // (1024 * 1024)} MiB")


_GUARD = "ragmux.guard"  # the request extension that carries a call's guard to the transport


def _pin_to_address(request: httpx.Request) -> None:
    host = request.url.host
    port = request.url.port or (443 if request.url.scheme == "https" else 80)
    guard: Guard = request.extensions.get(_GUARD, checked_addresses)
    address = guard(host, port)[0]
    if request.url.scheme == "https":
        request.extensions = {**request.extensions, "sni_hostname": host}
    # The Host header was set from the original URL when the request was built.
    if str(address) != host.strip("[]"):
        literal = f"[{address}]" if address.version == 6 else str(address)
        request.url = request.url.copy_with(host=literal)


def environment_proxy(url: httpx.URL) -> str | None:
    """The proxy HTTP_PROXY, HTTPS_PROXY or ALL_PROXY names for ``url`` (NO_PROXY respected), only
    with ALLOW_PRIVATE_UPSTREAMS: the SSRF guard checks the address it connects to, and behind a
    proxy that is the proxy's, so going through one is the operator's explicit choice. Read at
    each call, as httpx reads it only for clients that bring no transport of their own."""
    if not settings.ALLOW_PRIVATE_UPSTREAMS:
        return None
    patterns = {URLPattern(key): proxy for key, proxy in get_environment_proxies().items()}
    matching = sorted(pattern for pattern in patterns if pattern.matches(url))  # the most specific first
    return patterns[matching[0]] if matching else None


class GuardedTransport(httpx.HTTPTransport):
    def __init__(self, *, limits: httpx.Limits) -> None:
        super().__init__(retries=0, limits=limits)
        self._limits = limits
        self._through_proxy: dict[str, httpx.HTTPTransport] = {}

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if (proxy := environment_proxy(request.url)) is not None:
            if proxy not in self._through_proxy:
                self._through_proxy[proxy] = httpx.HTTPTransport(proxy=proxy, retries=0, limits=self._limits)
            return self._through_proxy[proxy].handle_request(request)
        _pin_to_address(request)
        return super().handle_request(request)


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


class AsyncGuardedTransport(httpx.AsyncHTTPTransport):
    def __init__(self, *, limits: httpx.Limits) -> None:
        super().__init__(retries=0, limits=limits)
        self._limits = limits
        self._through_proxy: dict[str, httpx.AsyncHTTPTransport] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if (proxy := environment_proxy(request.url)) is not None:
            if proxy not in self._through_proxy:
                self._through_proxy[proxy] = httpx.AsyncHTTPTransport(proxy=proxy, retries=0, limits=self._limits)
            return await self._through_proxy[proxy].handle_async_request(request)
        if _is_ip_literal(request.url.host):
            _pin_to_address(request)
        else:
            # Name resolution blocks; it must not stall every other stream on the event loop.
            await asyncio.to_thread(_pin_to_address, request)
        return await super().handle_async_request(request)


@dataclass
class UpstreamResponse:
    status: int
    headers: httpx.Headers
    content: bytes
    url: str
    elapsed_ms: int = 0
    _json: object = field(default=None, repr=False)

    def json(self):
        if self._json is None:
            self._json = json.loads(self.content)
        return self._json

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")


_client: httpx.Client | None = None


def _shared_client() -> httpx.Client:
    global _client
    if _client is None:
        _client = httpx.Client(
            # The limits are the transport's: a client given a transport ignores its own.
            transport=GuardedTransport(
                limits=httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=90)
            ),
            follow_redirects=False,
            trust_env=False,
        )
    return _client


def _next_hop(current: httpx.URL, response: httpx.Response, guard: Guard = checked_addresses) -> httpx.URL:
    location = response.headers.get("location")
    if not location:
        raise unreachable(f"upstream answered {response.status_code} without a Location", retryable=False)
    try:
        target = current.join(location)
        if target.scheme in ("http", "https"):
            parse_url(str(target))
    except (httpx.InvalidURL, InvalidUrl) as exc:
        raise unreachable(f"refused redirect to an invalid URL: {exc}", retryable=False) from None
    if target.scheme not in ("http", "https"):
        raise unreachable(f"refused redirect to a {target.scheme} URL", retryable=False)
    # With private upstreams allowed a provider's redirect may go anywhere: nothing to resolve. A
    # caller's own guard (an image fetch's, which allows no private address) is always asked.
    if guard is not checked_addresses or not settings.ALLOW_PRIVATE_UPSTREAMS:
        guard(target.host, target.port or (443 if target.scheme == "https" else 80))
    if current.scheme == "https" and target.scheme == "http":
        raise unreachable("refused redirect from https to http", retryable=False)
    if target.host != current.host:
        raise unreachable(f"refused redirect to another host ({target.host})", retryable=False)
    return target


def _call_target(url: str) -> httpx.URL:
    """A provider call's URL; one saved before `parse_url`'s rules (a base URL that now fails
    them) fails the call as the redirect to it would, never as a server error."""
    try:
        parse_url(url)
    except InvalidUrl as exc:
        raise unreachable(f"the upstream URL is not valid: {exc}", retryable=False) from None
    return httpx.URL(url)


def request(
    method: str,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    json_body: object = None,
    timeout: float | None = None,
    max_bytes: int | None = None,
) -> UpstreamResponse:
    """Sends one request through the guard and returns the whole (size-capped) response."""
    limit = max_bytes or settings.UPSTREAM_MAX_RESPONSE_MB * 1024 * 1024
    total = timeout or settings.UPSTREAM_TIMEOUT
    timeouts = httpx.Timeout(total, connect=min(total, settings.UPSTREAM_CONNECT_TIMEOUT))
    client = _shared_client()
    target = _call_target(url)
    started = time.monotonic()
    for _ in range(MAX_REDIRECTS + 1):
        try:
            with client.stream(method, target, headers=headers, json=json_body, timeout=timeouts) as response:
                if response.is_redirect:
                    target = _next_hop(target, response)
                    if response.status_code == 303:
                        method, json_body = "GET", None
                    continue
                body = bytearray()
                for chunk in response.iter_bytes():
                    body.extend(chunk)
                    if len(body) > limit:
                        raise _too_large(limit)
                return UpstreamResponse(
                    status=response.status_code,
                    headers=response.headers,
                    content=bytes(body),
                    url=str(target),
                    elapsed_ms=int((time.monotonic() - started) * 1000),
                )
        except httpx.TimeoutException:
            raise UpstreamTimeout(f"upstream timed out after {total:g}s", retryable=True) from None
        except httpx.TransportError as exc:
            raise unreachable(connection_failure_message(exc, str(target)), retryable=True) from None
    raise unreachable(f"more than {MAX_REDIRECTS} redirects", retryable=False)


# An AsyncClient's pooled connections belong to the event loop that opened them.
_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()


def _shared_async_client() -> httpx.AsyncClient:
    loop = asyncio.get_running_loop()
    client = _async_clients.get(loop)
    if client is None:
        client = httpx.AsyncClient(
            transport=AsyncGuardedTransport(
                limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100, keepalive_expiry=90),
            ),
            follow_redirects=False,
            trust_env=False,
            timeout=None,  # the deadlines below bound every step instead
        )
        _async_clients[loop] = client
    return client


@dataclass(frozen=True)
class ReadBounds:
    """How long and how much of one upstream answer may be read (deadlines on time.monotonic()).

    A JSON answer has one deadline for the whole call. A streamed answer has the call's
    first-byte deadline, then a bound on each gap between two reads (``idle_timeout``) and one on
    the whole stream, so a long answer that keeps coming is relayed to the end.
    """

    first_byte_timeout: float
    first_byte_deadline: float
    # The whole call's (a stream's: STREAM_MAX_DURATION), in seconds and as a deadline.
    whole_timeout: float
    deadline: float
    max_bytes: int
    # A stream's bound on the gap between two reads once its first byte has come; None: a JSON call.
    idle_timeout: float | None = None

    @classmethod
    def of_call(
        cls, *, started: float, timeout: float, first_byte_timeout: float, max_bytes: int | None, streamed: bool
    ) -> ReadBounds:
        """``timeout`` bounds a JSON call, and a stream until its first byte."""
        whole = settings.STREAM_MAX_DURATION if streamed else timeout
        first_byte_timeout = min(first_byte_timeout, timeout)
        if max_bytes is None:
            max_bytes = (settings.STREAM_MAX_BYTES_MB if streamed else settings.UPSTREAM_MAX_RESPONSE_MB) * MIB
        return cls(
            first_byte_timeout=first_byte_timeout,
            first_byte_deadline=started + min(whole, first_byte_timeout),
            whole_timeout=whole,
            deadline=started + whole,
            max_bytes=int(max_bytes),
            idle_timeout=settings.UPSTREAM_IDLE_TIMEOUT if streamed else None,
        )

    @property
    def streamed(self) -> bool:
        return self.idle_timeout is not None

    def next_deadline(self, *, begun: bool) -> float:
        """When the next read must have answered by."""
        if not begun:
            return self.first_byte_deadline
        if self.idle_timeout is None:
            return self.deadline
        return min(self.deadline, time.monotonic() + self.idle_timeout)

    def expired(self, deadline: float, *, begun: bool) -> UpstreamTimeout:
        """The failure of a read that ``deadline`` (a :meth:`next_deadline`) cut short."""
        # Never retried: a retry would make the caller wait the whole timeout again.
        if deadline < self.deadline:
            if not begun:
                return UpstreamTimeout(f"upstream sent nothing within {self.first_byte_timeout:.3g}s")
            return UpstreamTimeout(
                f"upstream sent nothing for {self.idle_timeout:g}s mid-stream (UPSTREAM_IDLE_TIMEOUT)"
            )
        if self.streamed:
            return UpstreamTimeout(
                f"the stream was ended after STREAM_MAX_DURATION ({self.whole_timeout:g}s)",
                code="stream_max_duration",
            )
        return UpstreamTimeout(f"upstream timed out after {self.whole_timeout:g}s")

    def too_large(self) -> UpstreamFailed:
        if self.streamed:
            # The upstream's fault as the client sees it (502), not a request too large (413).
            return UpstreamFailed(
                f"the stream was ended after STREAM_MAX_BYTES_MB ({self.max_bytes / MIB:g} MiB) from upstream",
                code="stream_max_bytes",
            )
        return _too_large(self.max_bytes)


class UpstreamStream:
    """An upstream response whose body has not been read yet, read within its :class:`ReadBounds`."""

    def __init__(self, response: httpx.Response, *, url: str, bounds: ReadBounds):
        self.status = response.status_code
        self.headers = response.headers
        self.url = url
        self._response = response
        self._bounds = bounds
        self._received = 0

    async def chunks(self) -> AsyncIterator[bytes]:
        pieces = self._response.aiter_bytes()
        while True:
            begun = self._received > 0
            deadline = self._bounds.next_deadline(begun=begun)
            if deadline <= time.monotonic():
                # A body that is already buffered is read without waiting, so no timer would fire.
                raise self._bounds.expired(deadline, begun=begun)
            try:
                async with asyncio.timeout_at(_loop_time(deadline)):
                    chunk = await anext(pieces)
            except StopAsyncIteration:
                return
            except TimeoutError:
                raise self._bounds.expired(deadline, begun=begun) from None
            except httpx.TransportError as exc:
                if begun:
                    # Not a wrong scheme or port: it was answering.
                    failure = unreachable(
                        f"{origin_of(self.url)} closed the stream in the middle of its answer", retryable=False
                    )
                    failure.client_message = "the upstream closed the stream in the middle of its answer"
                    raise failure from None
                raise unreachable(connection_failure_message(exc, self.url), retryable=True) from None
            self._received += len(chunk)
            if self._received > self._bounds.max_bytes:
                raise self._bounds.too_large()
            yield chunk

    async def read(self) -> bytes:
        body = bytearray()
        async for chunk in self.chunks():
            body.extend(chunk)
        return bytes(body)


def _loop_time(deadline: float) -> float:
    """``deadline`` (time.monotonic) on the event loop's clock."""
    return asyncio.get_running_loop().time() + (deadline - time.monotonic())


@asynccontextmanager
async def open_stream(
    method: str,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    json_body: object = None,
    timeout: float | None = None,
    first_byte_timeout: float | None = None,
    max_bytes: int | None = None,
    guard: Guard = checked_addresses,
    streamed: bool = False,
) -> AsyncIterator[UpstreamStream]:
    """Sends one request through ``guard`` and yields the response with its body unread.

    ``timeout`` (UPSTREAM_TIMEOUT) bounds the whole call, or with ``streamed`` (an answer relayed
    as it comes) only until its first byte: see :class:`ReadBounds`. The response is closed when
    the block exits, which is also how a caller that is cancelled (its client went away) ends the
    upstream call.
    """
    bounds = ReadBounds.of_call(
        started=time.monotonic(),
        timeout=timeout or settings.UPSTREAM_TIMEOUT,
        first_byte_timeout=settings.UPSTREAM_FIRST_BYTE_TIMEOUT if first_byte_timeout is None else first_byte_timeout,
        max_bytes=max_bytes,
        streamed=streamed,
    )
    client = _shared_async_client()
    target = _call_target(url)
    for _ in range(MAX_REDIRECTS + 1):
        request = client.build_request(method, target, headers=headers, json=json_body, extensions={_GUARD: guard})
        try:
            async with asyncio.timeout_at(_loop_time(bounds.first_byte_deadline)):
                response = await client.send(request, stream=True)
        except TimeoutError:
            raise bounds.expired(bounds.first_byte_deadline, begun=False) from None
        except httpx.TransportError as exc:
            raise unreachable(connection_failure_message(exc, str(target)), retryable=True) from None
        try:
            if response.is_redirect:
                target = await asyncio.to_thread(_next_hop, target, response, guard)
                if response.status_code == 303:
                    method, json_body = "GET", None
                continue
            yield UpstreamStream(response, url=str(target), bounds=bounds)
            return
        finally:
            await response.aclose()
    raise unreachable(f"more than {MAX_REDIRECTS} redirects", retryable=False)
