"""The OpenAI chat format, spoken by OpenAI and by OpenAI-compatible servers: relayed as is."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from gateway.connections.providers.chat_interface import ChatProvider
from gateway.connections.providers.stream_framing import sse_events
from gateway.connections.providers.upstream_errors import malformed, type_for_status


class OpenAIChat(ChatProvider):
    label = "openai"
    # OpenAI's reasoning models refuse `max_tokens`.
    token_limit_field = "max_completion_tokens"

    def _url(self, *, stream: bool) -> str:
        return f"{self.base_url}/chat/completions"

    def _payload(self, body: dict[str, Any], *, stream: bool) -> dict[str, Any]:
        payload = {**body, "model": self.model, "stream": stream}
        if stream:
            # Usage is always asked for: the request log needs it whatever the client wants.
            options = payload.get("stream_options")
            payload["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
        else:
            payload.pop("stream_options", None)
        return payload

    def _completion(self, reply: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(reply.get("choices"), list):
            raise malformed(self.label)
        return reply

    def _chunks(self, body: AsyncIterator[bytes]) -> AsyncIterator[dict]:
        return sse_events(body, self.label, self.api_key)

    def _classify(self, status: int, error: dict | None) -> tuple[int, str, str | None]:
        # The upstream already speaks the envelope: its own type and code are relayed.
        error = error or {}
        type_ = error["type"] if status < 500 and isinstance(error.get("type"), str) else type_for_status(status)
        return status, type_, error["code"] if isinstance(error.get("code"), str) else None


class CustomOpenAIChat(OpenAIChat):
    label = "custom_openai"
    # Compatible servers (vLLM, llama.cpp, LM Studio) have known `max_tokens` the longest.
    token_limit_field = "max_tokens"
