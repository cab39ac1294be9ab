"""Chat providers behind one interface.

A provider takes an OpenAI-format chat request body and answers in OpenAI format: a
``chat.completion`` object from :meth:`ChatProvider.complete`, or ``chat.completion.chunk``
objects from :meth:`ChatProvider.stream`. Adapters for providers with another wire format
translate both ways, so the client API only ever sees one shape.

Every failure is a :class:`ChatError` carrying the status and OpenAI error fields the client
should get: upstream 4xx/5xx answers keep their status, timeouts are 504 and transport
failures 502. Retryable failures are retried with backoff, but only before anything was
relayed: a stream is opened and its first chunk read before the caller gets it.
"""

from __future__ import annotations

import asyncio
import json
import re
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, TypeVar

from gateway.connections import http
from gateway.connections.credentials import open_api_key
from gateway.connections.models import ModelConnection, ProviderType
from gateway.connections.providers.embeddings import effective_base_url

MAX_ATTEMPTS = 3
BACKOFF_SECONDS = 0.25
RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})
MAX_ERROR_MESSAGE = 512
_SECRET_PATTERNS = re.compile(r"(Bearer\s+\S+|sk-[A-Za-z0-9_-]{8,}|eyJ[A-Za-z0-9_-]{10,}(\.[A-Za-z0-9_-]+)*)")

T = TypeVar("T")


class ChatError(Exception):
    """A chat call failed; ``status``, ``type`` and ``code`` are what the client is told."""

    def __init__(
        self, message: str, *, status: int, type: str = "upstream_error", code: str | None = None, retryable=False
    ):
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.code = code
        self.retryable = retryable


class NoChat(Exception):
    """The connection's provider type cannot answer chat requests."""


def redact(text: str, secret: str) -> str:
    """Upstream messages can echo credentials back; none of them may reach a client or a log."""
    if secret:
        text = text.replace(secret, "[redacted]")
    return _SECRET_PATTERNS.sub("[redacted]", text)


def _upstream_failure(exc: http.UpstreamError | http.UpstreamBlocked) -> ChatError:
    if isinstance(exc, http.UpstreamBlocked):
        return ChatError(exc.message, status=502, code="upstream_blocked")
    if exc.timed_out:
        return ChatError(str(exc), status=504, type="timeout", code="upstream_timeout")
    return ChatError(str(exc), status=502, code="upstream_unreachable", retryable=exc.retryable)


class ChatStream:
    """The chunks of a streamed answer; the first was read before the stream was handed over."""

    def __init__(self, first: dict | None, rest: AsyncIterator[dict]):
        self._first = first
        self._rest = rest

    async def __aiter__(self) -> AsyncIterator[dict]:
        if self._first is None:
            return
        yield self._first
        try:
            async for chunk in self._rest:
                yield chunk
        except (http.UpstreamError, http.UpstreamBlocked) as exc:
            raise _upstream_failure(exc) from None


class ChatProvider(ABC):
    label = "chat provider"

    def __init__(self, *, base_url: str, api_key: str, model: str):
        self.base_url = base_url
        self.api_key = api_key
        self.model = model

    @abstractmethod
    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """One non-streamed answer as an OpenAI ``chat.completion`` object."""

    @abstractmethod
    def stream(self, body: dict[str, Any]) -> AsyncIterator[ChatStream]:
        """An async context manager yielding the answer's chunks; leaving it ends the call."""

    async def _retrying(self, attempt: Callable[[], Awaitable[T]]) -> T:
        for number in range(1, MAX_ATTEMPTS + 1):
            try:
                return await attempt()
            except ChatError as exc:
                if not exc.retryable or number == MAX_ATTEMPTS:
                    raise
            await asyncio.sleep(BACKOFF_SECONDS * 2 ** (number - 1))
        raise AssertionError("unreachable")


def _sse_data(line: str) -> str | None:
    if line.startswith("data:"):
        return line[5:].removeprefix(" ")
    return None


async def _sse_events(chunks: AsyncIterator[bytes], label: str) -> AsyncIterator[dict]:
    """The JSON payloads of a server-sent event stream, up to ``[DONE]``."""
    buffer = b""
    data: list[str] = []
    async for chunk in chunks:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for raw in lines:
            line = raw.rstrip(b"\r").decode("utf-8", errors="replace")
            if line:
                value = _sse_data(line)
                if value is not None:
                    data.append(value)
                continue
            if not data:
                continue
            payload, data = "\n".join(data), []
            if payload.strip() == "[DONE]":
                return
            try:
                event = json.loads(payload)
            except ValueError:
                raise ChatError(
                    f"{label} sent a malformed stream event", status=502, code="upstream_malformed"
                ) from None
            if isinstance(event, dict) and isinstance(event.get("error"), (dict, str)):
                error = event["error"]
                message = error.get("message", "") if isinstance(error, dict) else error
                raise ChatError(f"{label} failed mid-stream: {message}"[:MAX_ERROR_MESSAGE], status=502)
            if isinstance(event, dict):
                yield event


class OpenAIChat(ChatProvider):
    label = "openai"

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _payload(self, body: dict[str, Any], *, stream: bool) -> dict[str, Any]:
        payload = {**body, "model": self.model, "stream": stream}
        if stream:
            # Usage is always asked for: the request log needs it whatever the client wants.
            options = payload.get("stream_options")
            payload["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
        else:
            payload.pop("stream_options", None)
        return payload

    def _status_error(self, status: int, content: bytes) -> ChatError:
        message, type_, code = "", "upstream_error", None
        try:
            error = json.loads(content).get("error")
        except (ValueError, AttributeError):
            error = None
        if isinstance(error, dict):
            message = str(error.get("message") or "")
            if status < 500 and isinstance(error.get("type"), str):
                type_ = error["type"]
            code = error.get("code") if isinstance(error.get("code"), str) else None
        elif isinstance(error, str):
            message = error
        if not message:
            message = content.decode("utf-8", errors="replace").strip() or "no details"
        message = redact(f"{self.label} answered HTTP {status}: {message}", self.api_key)[:MAX_ERROR_MESSAGE]
        return ChatError(message, status=status, type=type_, code=code, retryable=status in RETRYABLE_STATUSES)

    async def _complete_once(self, payload: dict[str, Any]) -> dict[str, Any]:
        try:
            async with http.open_stream(
                "POST", f"{self.base_url}/chat/completions", headers=self._headers(), json_body=payload
            ) as upstream:
                content = await upstream.read()
        except (http.UpstreamError, http.UpstreamBlocked) as exc:
            raise _upstream_failure(exc) from None
        if upstream.status >= 400:
            raise self._status_error(upstream.status, content)
        try:
            reply = json.loads(content)
        except ValueError:
            reply = None
        if not isinstance(reply, dict) or not isinstance(reply.get("choices"), list):
            raise ChatError(f"{self.label} returned a malformed body", status=502, code="upstream_malformed")
        return reply

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        payload = self._payload(body, stream=False)
        return await self._retrying(lambda: self._complete_once(payload))

    async def _open_once(self, payload: dict[str, Any]) -> tuple[AsyncExitStack, ChatStream]:
        stack = AsyncExitStack()
        try:
            upstream = await stack.enter_async_context(
                http.open_stream(
                    "POST",
                    f"{self.base_url}/chat/completions",
                    headers={**self._headers(), "Accept": "text/event-stream"},
                    json_body=payload,
                )
            )
            if upstream.status >= 400:
                raise self._status_error(upstream.status, await upstream.read())
            events = _sse_events(upstream.chunks(), self.label)
            first = await anext(events, None)
        except (http.UpstreamError, http.UpstreamBlocked) as exc:
            await stack.aclose()
            raise _upstream_failure(exc) from None
        except BaseException:
            await stack.aclose()
            raise
        return stack, ChatStream(first, events)

    @asynccontextmanager
    async def stream(self, body: dict[str, Any]) -> AsyncIterator[ChatStream]:
        payload = self._payload(body, stream=True)
        stack, chunks = await self._retrying(lambda: self._open_once(payload))
        async with stack:
            yield chunks


class CustomOpenAIChat(OpenAIChat):
    label = "custom_openai"


_CHAT_PROVIDERS: dict[str, type[ChatProvider]] = {
    ProviderType.OPENAI: OpenAIChat,
    ProviderType.CUSTOM_OPENAI: CustomOpenAIChat,
}
CHAT_PROVIDER_TYPES = frozenset(_CHAT_PROVIDERS)


def chat_provider(connection: ModelConnection) -> ChatProvider:
    provider_class = _CHAT_PROVIDERS.get(connection.provider_type)
    if provider_class is None:
        raise NoChat(f'provider "{connection.provider_type}" cannot be used for chat')
    return provider_class(
        base_url=effective_base_url(connection.provider_type, connection.base_url),
        api_key=open_api_key(connection),
        model=connection.model_name,
    )
