"""Ollama's native chat API (``POST /api/chat``, NDJSON when streaming) behind the OpenAI
chat format."""

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
    arguments_object,
    assistant_calls,
    content_parts,
    inline_image,
    invalid_request,
    json_schema_of,
    max_tokens,
    number,
    stop_sequences,
    text_of,
    tool_names,
    wants_json,
)
from gateway.connections.providers.stream_framing import ndjson_events
from gateway.connections.providers.upstream_errors import ended_early, malformed

# Request fields Ollama takes at the top level as they are.
PASSTHROUGH = ("keep_alive", "think")


def _usage(reply: dict) -> dict[str, Any]:
    return usage_object(count(reply.get("prompt_eval_count")), count(reply.get("eval_count")))


def _calls(message: dict) -> list[dict]:
    calls = message.get("tool_calls")
    found = []
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            # Ollama gives calls no ids; clients need one to answer.
            found.append(tool_call(new_id("call_"), function["name"], function.get("arguments") or {}))
    return found


def _finish(reply: dict, called_tools: bool) -> str:
    if called_tools:
        return "tool_calls"
    return "length" if reply.get("done_reason") == "length" else "stop"


class OllamaChat(ChatProvider):
    label = "ollama"
    stream_media_type = "application/x-ndjson"

    def _url(self, *, stream: bool) -> str:
        return f"{self.base_url}/api/chat"

    def _fetches_image(self, url: str) -> bool:
        return not url.startswith("data:")

    def _message(self, message: dict, where: str, names: dict[str, str]) -> dict:
        role, content = message.get("role"), message.get("content")
        if role in SYSTEM_ROLES:
            return {"role": "system", "content": text_of(content, where)}
        if role == "tool":
            result = {"role": "tool", "content": text_of(content, where)}
            name = names.get(str(message.get("tool_call_id") or ""))
            if name:
                result["tool_name"] = name
            return result
        if role not in ("user", "assistant"):
            raise invalid_request(f"{where}.role {role!r} is not supported")
        parts = content_parts(content, where)
        converted: dict[str, Any] = {
            "role": role,
            "content": "\n".join(part["text"] for part in parts if part["type"] == "text"),
        }
        images = [inline_image(part["url"], where, self.label)[1] for part in parts if part["type"] == "image_url"]
        if images:
            converted["images"] = images
        if role == "assistant":
            calls = assistant_calls(message, where)
            if calls:
                converted["tool_calls"] = [
                    {"function": {"name": call["name"], "arguments": arguments_object(call["arguments"])}}
                    for call in calls
                ]
        return converted

    def _payload(self, body: dict[str, Any], *, stream: bool) -> dict[str, Any]:
        messages = body["messages"]
        names = tool_names(messages)
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": [self._message(m, f"messages[{i}]", names) for i, m in enumerate(messages)],
            # Ollama streams unless told not to.
            "stream": stream,
        }
        options = dict(body["options"]) if isinstance(body.get("options"), dict) else {}
        for name in ("temperature", "top_p", "seed", "num_ctx"):
            if number(body, name) is not None:
                options[name] = body[name]
        limit = max_tokens(body)
        if limit:
            options["num_predict"] = limit
        stops = stop_sequences(body)
        if stops:
            options["stop"] = stops
        if options:
            payload["options"] = options
        response_format = wants_json(body)
        if response_format:
            payload["format"] = json_schema_of(response_format) or "json"
        if body.get("tools") and body.get("tool_choice") != "none":
            # Ollama takes OpenAI's tool definitions as they are, and has no tool_choice: a client
            # that forbade tools gets none sent, so the model cannot call one.
            payload["tools"] = body["tools"]
        for name in PASSTHROUGH:
            if name in body:
                payload[name] = body[name]
        return payload

    def _completion(self, reply: dict[str, Any]) -> dict[str, Any]:
        message = reply.get("message")
        if not isinstance(message, dict):
            raise malformed(self.label)
        calls = _calls(message)
        text = message.get("content") if isinstance(message.get("content"), str) else ""
        choice = {
            "index": 0,
            "message": assistant_message(text, calls),
            "finish_reason": _finish(reply, bool(calls)),
            "logprobs": None,
        }
        return completion_object(reply_id=new_id(), model=self.model, choices=[choice], usage=_usage(reply))

    async def _chunks(self, body: AsyncIterator[bytes]) -> AsyncIterator[dict]:
        out = Chunks(self.model)
        started, calls = False, 0
        async for line in ndjson_events(body, self.label, self.api_key):
            if not started:
                started = True
                yield out.start()
            message = line.get("message") if isinstance(line.get("message"), dict) else {}
            if isinstance(message.get("content"), str) and message["content"]:
                yield out.delta({"content": message["content"]})
            for call in _calls(message):
                # Each call arrives whole on one line: it is relayed as one delta.
                yield out.delta({"tool_calls": [{"index": calls, **call}]})
                calls += 1
            if line.get("done"):
                yield out.delta({}, finish_reason=_finish(line, calls > 0))
                yield out.usage(_usage(line))
                return
        raise ended_early(self.label)
