"""Anthropic's Messages API (``POST /v1/messages``) behind the OpenAI chat format."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from gateway.connections.providers.chat_interface import ChatProvider
from gateway.connections.providers.chat_reply import (
    Chunks,
    assistant_message,
    completion_object,
    count,
    new_id,
    tool_call,
    usage_object,
)
from gateway.connections.providers.chat_request import (
    SYSTEM_ROLES,
    ProviderCannot,
    arguments_object,
    assistant_calls,
    content_parts,
    forced_function,
    functions,
    inline_image,
    invalid_request,
    max_tokens,
    number,
    stop_sequences,
    text_of,
    wants_json,
)
from gateway.connections.providers.stream_framing import sse_events
from gateway.connections.providers.upstream_errors import ended_early, malformed, type_for_status

API_VERSION = "2023-06-01"
# Anthropic requires a bound on the answer; the client's, or this one.
DEFAULT_MAX_TOKENS = 4096
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
# 529 is Anthropic's "overloaded": to a client (and its SDK's retry logic) that is a 503.
_STATUSES = {529: 503}


def _usage(usage: Any) -> dict[str, Any]:
    usage = usage if isinstance(usage, dict) else {}
    cache_read = count(usage.get("cache_read_input_tokens"))
    cache_write = count(usage.get("cache_creation_input_tokens"))
    # Anthropic counts the cached and the cache-written parts apart from `input_tokens`.
    prompt = count(usage.get("input_tokens")) + cache_write + cache_read
    return usage_object(prompt, count(usage.get("output_tokens")), cached=cache_read, cache_write=cache_write)


class AnthropicChat(ChatProvider):
    label = "anthropic"

    def _url(self, *, stream: bool) -> str:
        return f"{self.base_url}/v1/messages"

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "anthropic-version": API_VERSION}
        if self.api_key:
            headers["x-api-key"] = self.api_key
        return headers

    # -- request -----------------------------------------------------------------------------

    def _blocks(self, content: Any, where: str) -> list[dict]:
        blocks = []
        for part in content_parts(content, where):
            if part["type"] == "text":
                block = {"type": "text", "text": part["text"]}
            elif part["url"].startswith("data:"):
                media_type, data = inline_image(part["url"], where, self.label)
                block = {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
            else:
                # Anthropic fetches remote images itself.
                block = {"type": "image", "source": {"type": "url", "url": part["url"]}}
            if isinstance(part.get("cache_control"), dict):
                block["cache_control"] = part["cache_control"]
            blocks.append(block)
        return blocks

    def _turns(self, messages: list[dict]) -> tuple[list[dict], list[dict]]:
        """The system blocks and the alternating user / assistant turns."""
        system: list[dict] = []
        turns: list[dict] = []
        for index, message in enumerate(messages):
            where = f"messages[{index}]"
            role, content = message.get("role"), message.get("content")
            if role in SYSTEM_ROLES:
                blocks = self._blocks(content, where)
                if any(block["type"] != "text" for block in blocks):
                    raise invalid_request(f"{where} may only hold text")
                system.extend(blocks)
                continue
            if role == "user":
                blocks = self._blocks(content, where)
            elif role == "assistant":
                blocks = self._blocks(content, where) + [
                    {
                        "type": "tool_use",
                        "id": call["id"] or new_id("toolu_"),
                        "name": call["name"],
                        "input": arguments_object(call["arguments"]),
                    }
                    for call in assistant_calls(message, where)
                ]
            elif role == "tool":
                role = "user"
                blocks = [
                    {
                        "type": "tool_result",
                        "tool_use_id": str(message.get("tool_call_id") or ""),
                        "content": text_of(content, where),
                    }
                ]
            else:
                raise invalid_request(f"{where}.role {role!r} is not supported")
            if not blocks:
                continue  # Anthropic refuses empty turns.
            # Anthropic wants turns to alternate: a run of one role is one turn (so the results
            # of parallel tool calls travel together, as it requires).
            if turns and turns[-1]["role"] == role:
                turns[-1]["content"].extend(blocks)
            else:
                turns.append({"role": role, "content": blocks})
        return system, turns

    def _payload(self, body: dict[str, Any], *, stream: bool) -> dict[str, Any]:
        system, turns = self._turns(body["messages"])
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": turns,
            "max_tokens": max_tokens(body) or DEFAULT_MAX_TOKENS,
            "stream": stream,
        }
        if system:
            # A cache marker needs the block form; without one, the plain string.
            if any("cache_control" in block for block in system):
                payload["system"] = system
            else:
                payload["system"] = "\n\n".join(block["text"] for block in system)
        if wants_json(body):
            # Anthropic has no JSON mode: dropping the format silently would answer prose to a
            # client that parses JSON.
            raise ProviderCannot(
                "Anthropic models have no JSON mode: response_format "
                f"{body['response_format'].get('type')!r} cannot be honoured; ask for JSON in the prompt, "
                "or use a tool whose parameters are the schema"
            )
        for name in ("temperature", "top_p"):
            if number(body, name) is not None:
                payload[name] = body[name]
        stops = stop_sequences(body)
        if stops:
            payload["stop_sequences"] = stops
        tools = functions(body)
        if tools:
            payload["tools"] = [
                {
                    "name": tool["name"],
                    "description": tool["description"],
                    "input_schema": tool["parameters"] or {"type": "object", "properties": {}},
                }
                for tool in tools
            ]
            choice = _tool_choice(body.get("tool_choice"))
            if body.get("parallel_tool_calls") is False:
                choice = {**(choice or {"type": "auto"}), "disable_parallel_tool_use": True}
            if choice:
                payload["tool_choice"] = choice
        return payload

    # -- reply -------------------------------------------------------------------------------

    def _completion(self, reply: dict[str, Any]) -> dict[str, Any]:
        blocks = reply.get("content")
        if not isinstance(blocks, list):
            raise malformed(self.label)
        text = "".join(b["text"] for b in blocks if isinstance(b, dict) and b.get("type") == "text" and "text" in b)
        calls = [
            tool_call(str(b.get("id") or new_id("call_")), str(b.get("name")), b.get("input"))
            for b in blocks
            if isinstance(b, dict) and b.get("type") == "tool_use"
        ]
        choice = {
            "index": 0,
            "message": assistant_message(text, calls),
            "finish_reason": FINISH_REASONS.get(reply.get("stop_reason"), "stop"),
            "logprobs": None,
        }
        return completion_object(
            reply_id=str(reply.get("id") or new_id()),
            model=self.model,
            choices=[choice],
            usage=_usage(reply.get("usage")),
        )

    async def _chunks(self, body: AsyncIterator[bytes]) -> AsyncIterator[dict]:
        out = Chunks(self.model)
        usage: dict[str, Any] = {}
        finish = "stop"
        calls: dict[Any, int] = {}  # content block index -> tool call index
        async for event in sse_events(body, self.label, self.api_key):
            kind = event.get("type")
            if kind == "message_start":
                message = event.get("message") if isinstance(event.get("message"), dict) else {}
                out.id = str(message.get("id") or out.id)
                usage.update(message.get("usage") or {})
                yield out.start()
            elif kind == "content_block_start":
                block = event.get("content_block") if isinstance(event.get("content_block"), dict) else {}
                if block.get("type") == "tool_use":
                    calls[event.get("index")] = len(calls)
                    call = tool_call(str(block.get("id") or new_id("call_")), str(block.get("name")), "")
                    yield out.delta({"tool_calls": [{"index": calls[event.get("index")], **call}]})
                elif block.get("type") == "text" and block.get("text"):
                    yield out.delta({"content": block["text"]})
            elif kind == "content_block_delta":
                delta = event.get("delta") if isinstance(event.get("delta"), dict) else {}
                if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
                    yield out.delta({"content": delta["text"]})
                elif delta.get("type") == "input_json_delta" and event.get("index") in calls:
                    fragment = {"arguments": str(delta.get("partial_json", ""))}
                    yield out.delta({"tool_calls": [{"index": calls[event["index"]], "function": fragment}]})
            elif kind == "message_delta":
                delta = event.get("delta") if isinstance(event.get("delta"), dict) else {}
                finish = FINISH_REASONS.get(delta.get("stop_reason"), "stop")
                # The counts here are cumulative: they replace those of `message_start`.
                usage.update(event.get("usage") or {})
            elif kind == "message_stop":
                yield out.delta({}, finish_reason=finish)
                yield out.usage(_usage(usage))
                return
        raise ended_early(self.label)

    def _classify(self, status: int, error: dict | None) -> tuple[int, str, str | None]:
        status = _STATUSES.get(status, status)
        code = error.get("type") if error and isinstance(error.get("type"), str) else None
        return status, type_for_status(status), code


def _tool_choice(choice: Any) -> dict | None:
    if choice is None:
        return None
    if choice == "auto":
        return {"type": "auto"}
    if choice == "required":
        return {"type": "any"}
    if choice == "none":
        return {"type": "none"}
    name = forced_function(choice)
    if name is None:
        raise invalid_request('tool_choice must be "auto", "none", "required" or a named function')
    return {"type": "tool", "name": name}
