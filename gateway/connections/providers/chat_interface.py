"""The interface every chat adapter implements, and the calls made through it.

An adapter says only what differs per provider: the URL and headers, the payload it builds
from an OpenAI-format request, how it reads a reply and a stream back into OpenAI's
``chat.completion`` and ``chat.completion.chunk`` objects, and how its error bodies map to
the status, type and code a client gets. :class:`ChatProvider` makes the calls: retries
before the first byte, the first chunk read before a stream is handed over, and every
failure a :class:`~ragmux.core.errors.ServiceError` kind (a request the provider's format
cannot say is :class:`~ragmux.core.errors.InvalidInput`, the rest
:class:`~ragmux.core.errors.UpstreamFailed`).
"""

from __future__ import annotations

import asyncio
import json
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from django.conf import settings

from gateway.connections import http
from gateway.connections.images import RemoteImages
from gateway.connections.providers.upstream_errors import by_status, malformed, refusal, retry_wait
from ragmux.core.errors import UpstreamFailed

MAX_ATTEMPTS = 3
BACKOFF_SECONDS = 0.25
RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})

T = TypeVar("T")


@dataclass(frozen=True)
class SingleAttempt:
    """A call made one time, not retried: ``first_byte_timeout`` seconds (None: the global
    UPSTREAM_FIRST_BYTE_TIMEOUT) for the first byte."""

    first_byte_timeout: float | None = None


class ChatStream:
    """The chunks of a streamed answer; the first was read before the stream was handed over."""

    def __init__(self, first: dict | None, rest: AsyncIterator[dict]):
        self._first = first
        self._rest = rest

    async def __aiter__(self) -> AsyncIterator[dict]:
        if self._first is None:
            return
        yield self._first
        async for chunk in self._rest:
            yield chunk


class ChatProvider(ABC):
    """One chat connection. :meth:`complete` and :meth:`stream` take an OpenAI-format request
    body and answer in OpenAI format, whatever the provider's own wire format is."""

    label = "chat provider"
    # The request field that bounds the answer's length in a probe.
    token_limit_field = "max_tokens"
    stream_media_type = "text/event-stream"

    def __init__(self, *, base_url: str, api_key: str, model: str):
        self.base_url = base_url
        self.api_key = api_key
        self.model = model

    # -- the wire format, per provider -----------------------------------------------------

    @abstractmethod
    def _url(self, *, stream: bool) -> str:
        """Where the call goes."""

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _fetches_image(self, url: str) -> bool:
        """Whether the gateway must fetch the image at ``url`` and send it inline, because the
        provider cannot read it by its URL."""
        return False

    @abstractmethod
    def _payload(self, body: dict[str, Any], *, stream: bool) -> dict[str, Any]:
        """The provider's request for an OpenAI-format request body."""

    @abstractmethod
    def _completion(self, reply: dict[str, Any]) -> dict[str, Any]:
        """An OpenAI ``chat.completion`` for the provider's JSON reply."""

    @abstractmethod
    def _chunks(self, body: AsyncIterator[bytes]) -> AsyncIterator[dict]:
        """OpenAI ``chat.completion.chunk`` objects for the provider's streamed body."""

    def _classify(self, status: int, error: dict | None) -> tuple[int, str, str | None]:
        """The status, OpenAI error type and code a client gets for an upstream error."""
        return by_status(status, error)

    # -- the calls ---------------------------------------------------------------------------

    def _refusal(self, status: int, content: bytes, headers) -> UpstreamFailed:
        return refusal(
            label=self.label,
            secret=self.api_key,
            status=status,
            content=content,
            headers=headers,
            classify=self._classify,
            retryable_statuses=RETRYABLE_STATUSES,
        )

    def _reply(self, content: bytes) -> dict[str, Any]:
        try:
            reply = json.loads(content)
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            raise malformed(self.label)
        return self._completion(reply)

    async def _complete_once(self, payload: dict[str, Any], first_byte_timeout: float) -> dict[str, Any]:
        async with http.open_stream(
            "POST",
            self._url(stream=False),
            headers=self._headers(),
            json_body=payload,
            first_byte_timeout=first_byte_timeout,
        ) as upstream:
            content = await upstream.read()
        if upstream.status >= 400:
            raise self._refusal(upstream.status, content, upstream.headers)
        return self._reply(content)

    async def _with_images(self, body: dict[str, Any], images: RemoteImages | None) -> dict[str, Any]:
        """``body`` with the remote images this provider cannot read by URL fetched into it; without
        ``images`` they are left as they are (and refused by the adapters that need them inline)."""
        return body if images is None else await images.inlined(body, self._fetches_image)

    async def complete(
        self, body: dict[str, Any], *, once: SingleAttempt | None = None, images: RemoteImages | None = None
    ) -> dict[str, Any]:
        """One non-streamed answer as an OpenAI ``chat.completion`` object."""
        payload = self._payload(await self._with_images(body, images), stream=False)
        return await self._retrying(
            lambda first_byte_timeout: self._complete_once(payload, first_byte_timeout), once=once
        )

    async def _open_once(self, payload: dict[str, Any], first_byte_timeout: float) -> tuple[AsyncExitStack, ChatStream]:
        stack = AsyncExitStack()
        try:
            upstream = await stack.enter_async_context(
                http.open_stream(
                    "POST",
                    self._url(stream=True),
                    headers={**self._headers(), "Accept": self.stream_media_type},
                    json_body=payload,
                    first_byte_timeout=first_byte_timeout,
                    streamed=True,
                )
            )
            if upstream.status >= 400:
                raise self._refusal(upstream.status, await upstream.read(), upstream.headers)
            chunks = self._chunks(upstream.chunks())
            first = await anext(chunks, None)
        except BaseException:
            await stack.aclose()
            raise
        return stack, ChatStream(first, chunks)

    @asynccontextmanager
    async def stream(
        self, body: dict[str, Any], *, once: SingleAttempt | None = None, images: RemoteImages | None = None
    ) -> AsyncIterator[ChatStream]:
        """An async context manager yielding the answer's chunks; leaving it ends the call."""
        payload = self._payload(await self._with_images(body, images), stream=True)
        stack, chunks = await self._retrying(
            lambda first_byte_timeout: self._open_once(payload, first_byte_timeout), once=once
        )
        async with stack:
            yield chunks

    def complete_blocking(self, body: dict[str, Any], *, timeout: float) -> dict[str, Any]:
        """One non-streamed answer by the blocking client, in one attempt: for callers that are not
        on the event loop (the connection test, a dashboard search's rerank)."""
        upstream = http.request(
            "POST",
            self._url(stream=False),
            headers=self._headers(),
            json_body=self._payload(body, stream=False),
            timeout=timeout,
        )
        if upstream.status >= 400:
            raise self._refusal(upstream.status, upstream.content, upstream.headers)
        return self._reply(upstream.content)

    def probe(self, *, timeout: float) -> dict[str, Any]:
        """A one-token answer: the connection test's chat call."""
        body = {"messages": [{"role": "user", "content": "ping"}], self.token_limit_field: 1}
        return self.complete_blocking(body, timeout=timeout)

    async def _retrying(self, attempt: Callable[[float], Awaitable[T]], *, once: SingleAttempt | None) -> T:
        """Makes the call (``attempt`` is given the seconds left for the first byte), again after a
        failure that may pass, waiting as long as the provider's ``Retry-After`` asks, else backing
        off. The first-byte budget (UPSTREAM_FIRST_BYTE_TIMEOUT) is the call's, waits included: a
        wait it cannot hold is not waited, and the failure goes to the client with its
        ``Retry-After``, which the client can honour better than a held call. With ``once`` (a
        route's target, whose retry is the route's next target) the call is made one time, within
        its own first-byte timeout."""
        if once is not None:
            return await attempt(once.first_byte_timeout or settings.UPSTREAM_FIRST_BYTE_TIMEOUT)
        deadline = time.monotonic() + settings.UPSTREAM_FIRST_BYTE_TIMEOUT
        for number in range(1, MAX_ATTEMPTS + 1):
            try:
                return await attempt(deadline - time.monotonic())
            except UpstreamFailed as exc:
                wait = retry_wait(exc, backoff=BACKOFF_SECONDS * 2 ** (number - 1))
                if not exc.retryable or number == MAX_ATTEMPTS or time.monotonic() + wait >= deadline:
                    raise
            await asyncio.sleep(wait)
        raise AssertionError("unreachable")
