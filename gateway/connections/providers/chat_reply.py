"""OpenAI's ``chat.completion`` and ``chat.completion.chunk`` objects, as the chat adapters
build them from a provider's reply."""

from __future__ import annotations

import json
import secrets
import time
from typing import Any


def new_id(prefix: str = "chatcmpl-") -> str:
    return prefix + secrets.token_hex(12)


def usage_object(
    prompt: int, completion: int, *, cached: int = 0, cache_write: int = 0, reasoning: int = 0
) -> dict[str, Any]:
    """OpenAI's usage object. ``prompt`` counts every prompt token, the ``cached`` ones read from
    the provider's prompt cache and the ``cache_write`` ones written to it included; OpenAI has
    no name for the last, which is said as OpenRouter says it (`cache_write_tokens`)."""
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached, "cache_write_tokens": cache_write},
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
