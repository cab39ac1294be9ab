"""What every chat adapter shares: the call itself, the OpenAI shapes, and reading a request.

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
import base64
import binascii
import json
import re
import secrets
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, TypeVar

from gateway.connections import http
from gateway.connections.providers.upstream_errors import (
    MAX_ERROR_MESSAGE,
    by_status,
    malformed,
    redact,
    refusal,
)
from ragmux.core.errors import Conflict, InvalidInput, UpstreamFailed

MAX_ATTEMPTS = 3
BACKOFF_SECONDS = 0.25
RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})
SYSTEM_ROLES = ("system", "developer")
_DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)(?P<params>(;[^,;]*)*),(?P<data>.*)$", re.DOTALL)

T = TypeVar("T")


class NoChat(Conflict):
    """The connection's provider type cannot answer chat requests."""

    code = "chat_unavailable"


def invalid_request(message: str) -> InvalidInput:
    """The client's request cannot be said in the provider's format: the client must change it."""
    return InvalidInput(message, code="invalid_request")


# --------------------------------------------------------------------------------------------
# OpenAI's shapes, as the adapters answer them
# --------------------------------------------------------------------------------------------


def new_id(prefix: str = "chatcmpl-") -> str:
    return prefix + secrets.token_hex(12)


def usage_object(prompt: int, completion: int, *, cached: int = 0, reasoning: int = 0) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


def count(value: object) -> int:
    """A token count from an upstream body; anything that is not a count is none."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def tool_call(call_id: str, name: str, arguments: object) -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments if arguments is not None else {})
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def assistant_message(text: str, tool_calls: list[dict]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not tool_calls else None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message


def completion_object(*, reply_id: str, model: str, choices: list[dict], usage: dict | None) -> dict[str, Any]:
    completion = {
        "id": reply_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
    }
    if usage is not None:
        completion["usage"] = usage
    return completion


class Chunks:
    """Builds the ``chat.completion.chunk`` objects of one translated stream."""

    def __init__(self, model: str):
        self.id = new_id()
        self.model = model
        self.created = int(time.time())

    def _chunk(self, choices: list[dict], **extra) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            **extra,
        }

    def delta(self, delta: dict, *, index: int = 0, finish_reason: str | None = None) -> dict[str, Any]:
        return self._chunk([{"index": index, "delta": delta, "finish_reason": finish_reason}])

    def start(self) -> dict[str, Any]:
        return self.delta({"role": "assistant", "content": ""})

    def usage(self, usage: dict) -> dict[str, Any]:
        # OpenAI's own last chunk: no choices, only the usage (v1 hides it unless asked for).
        return self._chunk([], usage=usage)


def ended_early(label: str) -> UpstreamFailed:
    return UpstreamFailed(f"{label} ended the stream before the answer was complete", code="upstream_truncated")


# --------------------------------------------------------------------------------------------
# Reading an OpenAI-format request
# --------------------------------------------------------------------------------------------


def content_parts(content: Any, where: str) -> list[dict]:
    """A message's content as a list of parts; a plain string is one text part."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise invalid_request(f"{where}.content must be a string or a list of parts")
    parts = []
    for number, part in enumerate(content):
        if not isinstance(part, dict):
            raise invalid_request(f"{where}.content[{number}] must be an object")
        kind = part.get("type", "text")
        if kind == "text":
            if not isinstance(part.get("text"), str):
                raise invalid_request(f"{where}.content[{number}].text must be a string")
            if part["text"]:
                parts.append({**part, "type": "text"})
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if not isinstance(url, str) or not url:
                raise invalid_request(f"{where}.content[{number}].image_url.url must be a string")
            parts.append({**part, "type": "image_url", "url": url})
        else:
            raise invalid_request(f"{where}.content[{number}]: parts of type {kind!r} are not supported")
    return parts


def text_of(content: Any, where: str) -> str:
    """The text of a message whose provider takes text only (system text, tool results)."""
    parts = content_parts(content, where)
    if any(part["type"] != "text" for part in parts):
        raise invalid_request(f"{where} may only hold text")
    return "\n".join(part["text"] for part in parts)


def inline_image(url: str, where: str, label: str) -> tuple[str, str]:
    """The media type and base64 data of a ``data:`` URL image."""
    match = _DATA_URL.match(url)
    if match is None:
        raise invalid_request(f"{where}: {label} takes images inline only; send the image as a data: URL (base64)")
    if ";base64" not in match["params"]:
        raise invalid_request(f"{where}: a data: URL image must be base64-encoded")
    try:
        decoded = base64.b64decode(match["data"], validate=True)
    except (binascii.Error, ValueError):
        decoded = b""
    if not decoded:
        raise invalid_request(f"{where}: the data: URL holds no valid base64 image")
    if not match["mime"].startswith("image/"):
        raise invalid_request(f"{where}: a data: URL image must have an image/* media type")
    return match["mime"], match["data"]


def arguments_object(arguments: Any) -> dict:
    """A tool call's arguments as the object Anthropic, Gemini and Ollama take."""
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments) if isinstance(arguments, str) else None
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {}


def assistant_calls(message: dict, where: str) -> list[dict]:
    """The function calls of an assistant message, each as {id, name, arguments}."""
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise invalid_request(f"{where}.tool_calls must be a list")
    found = []
    for number, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise invalid_request(f"{where}.tool_calls[{number}] must name a function")
        found.append(
            {"id": str(call.get("id") or ""), "name": function["name"], "arguments": function.get("arguments")}
        )
    return found


def tool_names(messages: list[dict]) -> dict[str, str]:
    """The function name of every tool call in the history, by call id."""
    names = {}
    for number, message in enumerate(messages):
        if message.get("role") == "assistant":
            for call in assistant_calls(message, f"messages[{number}]"):
                names[call["id"]] = call["name"]
    return names


def functions(body: dict) -> list[dict]:
    """The request's function tools, each as {name, description, parameters}."""
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise invalid_request("tools must be a list")
    found = []
    for number, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise invalid_request(f"tools[{number}] must be a function with a name")
        parameters = function.get("parameters")
        found.append(
            {
                "name": function["name"],
                "description": function.get("description") if isinstance(function.get("description"), str) else "",
                "parameters": parameters if isinstance(parameters, dict) else None,
            }
        )
    return found


def forced_function(tool_choice: Any) -> str | None:
    """The function a ``tool_choice`` object names, if it names one."""
    if isinstance(tool_choice, dict):
        function = tool_choice.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return function["name"]
    return None


def stop_sequences(body: dict) -> list[str] | None:
    stop = body.get("stop")
    if stop is None:
        return None
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise invalid_request("stop must be a string or a list of strings")
    return stops or None


def max_tokens(body: dict) -> int | None:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is not None:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise invalid_request(f"{name} must be a positive integer")
            return value
    return None


def number(body: dict, name: str) -> float | None:
    value = body.get(name)
    if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
        raise invalid_request(f"{name} must be a number")
    return value


def wants_json(body: dict) -> dict | None:
    """The ``response_format`` when it asks for JSON (``json_object`` or ``json_schema``)."""
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and str(response_format.get("type", "")).startswith("json"):
        return response_format
    return None


# --------------------------------------------------------------------------------------------
# Stream framing
# --------------------------------------------------------------------------------------------


def _mid_stream_error(event: object, label: str, secret: str) -> None:
    if isinstance(event, dict) and isinstance(event.get("error"), (dict, str)):
        error = event["error"]
        message = error.get("message", "") if isinstance(error, dict) else error
        raise UpstreamFailed(redact(f"{label} failed mid-stream: {message}", secret)[:MAX_ERROR_MESSAGE])


async def sse_events(chunks: AsyncIterator[bytes], label: str, secret: str) -> AsyncIterator[dict]:
    """The JSON payloads of a server-sent event stream, up to ``[DONE]`` or its end."""
    buffer = b""
    data: list[str] = []
    async for chunk in chunks:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for raw in lines:
            line = raw.rstrip(b"\r").decode("utf-8", errors="replace")
            if line:
                if line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
                continue
            if not data:
                continue
            payload, data = "\n".join(data), []
            if payload.strip() == "[DONE]":
                return
            try:
                event = json.loads(payload)
            except ValueError:
                raise malformed(label, "stream event") from None
            _mid_stream_error(event, label, secret)
            if isinstance(event, dict):
                yield event


async def ndjson_events(chunks: AsyncIterator[bytes], label: str, secret: str) -> AsyncIterator[dict]:
    """The objects of a newline-delimited JSON stream."""
    buffer = b""
    async for chunk in chunks:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError:
                raise malformed(label, "stream line") from None
            _mid_stream_error(event, label, secret)
            if isinstance(event, dict):
                yield event


# --------------------------------------------------------------------------------------------
# The interface and the calls
# --------------------------------------------------------------------------------------------


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

    async def _complete_once(self, payload: dict[str, Any]) -> dict[str, Any]:
        async with http.open_stream(
            "POST", self._url(stream=False), headers=self._headers(), json_body=payload
        ) as upstream:
            content = await upstream.read()
        if upstream.status >= 400:
            raise self._refusal(upstream.status, content, upstream.headers)
        return self._reply(content)

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """One non-streamed answer as an OpenAI ``chat.completion`` object."""
        payload = self._payload(body, stream=False)
        return await self._retrying(lambda: self._complete_once(payload))

    async def _open_once(self, payload: dict[str, Any]) -> tuple[AsyncExitStack, ChatStream]:
        stack = AsyncExitStack()
        try:
            upstream = await stack.enter_async_context(
                http.open_stream(
                    "POST",
                    self._url(stream=True),
                    headers={**self._headers(), "Accept": self.stream_media_type},
                    json_body=payload,
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
    async def stream(self, body: dict[str, Any]) -> AsyncIterator[ChatStream]:
        """An async context manager yielding the answer's chunks; leaving it ends the call."""
        payload = self._payload(body, stream=True)
        stack, chunks = await self._retrying(lambda: self._open_once(payload))
        async with stack:
            yield chunks

    def probe(self, *, timeout: float) -> dict[str, Any]:
        """A one-token answer, by the blocking client: the connection test's chat call."""
        body = {"messages": [{"role": "user", "content": "ping"}], self.token_limit_field: 1}
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

    async def _retrying(self, attempt: Callable[[], Awaitable[T]]) -> T:
        for number in range(1, MAX_ATTEMPTS + 1):
            try:
                return await attempt()
            except UpstreamFailed as exc:
                if not exc.retryable or number == MAX_ATTEMPTS:
                    raise
            await asyncio.sleep(BACKOFF_SECONDS * 2 ** (number - 1))
        raise AssertionError("unreachable")
