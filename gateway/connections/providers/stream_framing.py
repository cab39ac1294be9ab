"""The framings providers stream in: server-sent events and newline-delimited JSON, read into
the JSON objects they carry. An error event inside a stream ends it as an
:class:`~ragmux.core.errors.UpstreamFailed`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from gateway.connections.providers.upstream_errors import MAX_ERROR_MESSAGE, malformed, redact
from ragmux.core.errors import UpstreamFailed


def _event(text: str | bytes, label: str, secret: str, what: str) -> dict | None:
    """One framed JSON object; an error the provider sends mid-stream ends the stream."""
    try:
        event = json.loads(text)
    except ValueError:
        raise malformed(label, what) from None
    if isinstance(event, dict) and isinstance(event.get("error"), (dict, str)):
        error = event["error"]
        message = error.get("message", "") if isinstance(error, dict) else error
        raise UpstreamFailed(redact(f"{label} failed mid-stream: {message}", secret)[:MAX_ERROR_MESSAGE])
    return event if isinstance(event, dict) else None


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
            event = _event(payload, label, secret, "stream event")
            if event is not None:
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
            event = _event(line, label, secret, "stream line")
            if event is not None:
                yield event
