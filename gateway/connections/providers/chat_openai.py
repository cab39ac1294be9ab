"""The OpenAI chat format, spoken by OpenAI, by OpenAI-compatible servers and by Azure OpenAI:
relayed as is, but for DeepSeek's prompt-cache count, said where OpenAI says it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from gateway.connections.providers import azure
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
        return fold_cache_hits(reply)

    async def _chunks(self, body: AsyncIterator[bytes]) -> AsyncIterator[dict]:
        async for chunk in sse_events(body, self.label, self.api_key):
            yield fold_cache_hits(chunk)

    def _classify(self, status: int, error: dict | None) -> tuple[int, str, str | None]:
        # The upstream already speaks the envelope: its own type and code are relayed.
        error = error or {}
        type_ = error["type"] if status < 500 and isinstance(error.get("type"), str) else type_for_status(status)
        return status, type_, error["code"] if isinstance(error.get("code"), str) else None


class CustomOpenAIChat(OpenAIChat):
    label = "custom_openai"
    # Compatible servers (vLLM, llama.cpp, LM Studio) have known `max_tokens` the longest.
    token_limit_field = "max_tokens"

    def _payload(self, body: dict[str, Any], *, stream: bool) -> dict[str, Any]:
        payload = super()._payload(body, stream=stream)
        # A limit under OpenAI's newer name (what /v1/responses' max_output_tokens becomes) is
        # ignored by a server that predates it: it goes by the name they all know.
        limit = payload.pop("max_completion_tokens", None)
        if limit is not None:
            payload.setdefault(self.token_limit_field, limit)
        return payload


class AzureOpenAIChat(OpenAIChat):
    """OpenAI's chat under Azure's paths, key header and error codes (see azure.py)."""

    label = "azure_openai"

    def __init__(self, *, api_version: str, **kwargs):
        super().__init__(**kwargs)
        self.api_version = api_version

    def _url(self, *, stream: bool) -> str:
        return azure.operation_url(
            self.base_url, deployment=self.model, api_version=self.api_version, operation="chat/completions"
        )

    def _headers(self) -> dict[str, str]:
        return {"Content-Type": "application/json", **azure.headers(self.api_key)}

    def _classify(self, status: int, error: dict | None) -> tuple[int, str, str | None]:
        return azure.classify(status, error)


def fold_cache_hits(reply: dict[str, Any]) -> dict[str, Any]:
    """A reply (or chunk) whose usage counts prompt-cache hits as DeepSeek does
    (``prompt_cache_hit_tokens``) with them also in ``prompt_tokens_details.cached_tokens``,
    where OpenAI's clients and the request log read them; DeepSeek's own fields stay."""
    usage = reply.get("usage")
    hits = usage.get("prompt_cache_hit_tokens") if isinstance(usage, dict) else None
    if not isinstance(hits, int) or isinstance(hits, bool) or hits < 0:
        return reply
    details = usage.get("prompt_tokens_details")
    details = dict(details) if isinstance(details, dict) else {}
    known = details.get("cached_tokens")
    details["cached_tokens"] = max(hits, known if isinstance(known, int) and not isinstance(known, bool) else 0)
    return {**reply, "usage": {**usage, "prompt_tokens_details": details}}
