"""Gemini's ``generateContent`` / ``streamGenerateContent`` behind the OpenAI chat format."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

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
    forced_function,
    functions,
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
from gateway.connections.providers.stream_framing import sse_events
from gateway.connections.providers.upstream_errors import ended_early, malformed, type_for_status

logger = logging.getLogger("ragmux.gateway.gemini")

FILTERED = frozenset({"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY"})
# Images Gemini reads by reference rather than inline: its Files API and Cloud Storage.
FILE_URI_PREFIXES = ("gs://", "https://generativelanguage.googleapis.com/")
# The schema keywords Gemini's function declarations accept; others make it refuse the call.
SCHEMA_KEYWORDS = frozenset(
    {
        "type",
        "description",
        "enum",
        "required",
        "nullable",
        "minimum",
        "maximum",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "pattern",
    }
)
SCHEMA_FORMATS = {"string": {"enum", "date-time"}, "number": {"float", "double"}, "integer": {"int32", "int64"}}
_TOOL_CHOICE_MODES = {"auto": "AUTO", "required": "ANY", "none": "NONE"}


def gemini_schema(node: Any) -> dict:
    """A JSON schema cut down to what Gemini accepts; never fails."""
    if not isinstance(node, dict):
        return {"type": "object"}
    schema: dict[str, Any] = {}
    for key, value in node.items():
        if key == "type" and isinstance(value, list):
            # ["string", "null"] is said as a type plus `nullable`.
            types = [t for t in value if t != "null"]
            schema["type"] = types[0] if types else "string"
            if "null" in value:
                schema["nullable"] = True
        elif key == "const":
            schema["enum"] = [value]
        elif key in ("anyOf", "oneOf", "allOf") and isinstance(value, list):
            schema["anyOf"] = [gemini_schema(branch) for branch in value]
        elif key == "properties" and isinstance(value, dict):
            schema["properties"] = {name: gemini_schema(child) for name, child in value.items()}
        elif key == "items":
            schema["items"] = gemini_schema(value)
        elif key in SCHEMA_KEYWORDS:
            schema[key] = value
    kind = schema.get("type") if isinstance(schema.get("type"), str) else ""
    if node.get("format") in SCHEMA_FORMATS.get(kind, ()):
        schema["format"] = node["format"]
    return schema


def _usage(metadata: Any) -> dict[str, Any]:
    metadata = metadata if isinstance(metadata, dict) else {}
    thoughts = count(metadata.get("thoughtsTokenCount"))
    return usage_object(
        count(metadata.get("promptTokenCount")) + count(metadata.get("toolUsePromptTokenCount")),
        count(metadata.get("candidatesTokenCount")) + thoughts,
        cached=count(metadata.get("cachedContentTokenCount")),
        reasoning=thoughts,
    )


def _finish(reason: Any, called_tools: bool) -> str:
    if reason in FILTERED:
        return "content_filter"
    if called_tools:
        return "tool_calls"
    return "length" if reason == "MAX_TOKENS" else "stop"


def _answer_parts(candidate: Any) -> list[dict]:
    content = candidate.get("content") if isinstance(candidate, dict) else None
    parts = content.get("parts") if isinstance(content, dict) else None
    # Thought summaries are the model's reasoning, not its answer.
    return [p for p in parts if isinstance(p, dict) and not p.get("thought")] if isinstance(parts, list) else []


def _call_of(part: dict) -> dict | None:
    call = part.get("functionCall")
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    # Gemini gives calls no ids (newer models sometimes do); clients need one to answer.
    return tool_call(str(call.get("id") or new_id("call_")), call["name"], call.get("args") or {})


def _result_object(text: str) -> dict:
    """A tool result as the object `functionResponse.response` must be."""
    try:
        value = json.loads(text)
    except ValueError:
        value = text
    return value if isinstance(value, dict) else {"result": value}


class GeminiChat(ChatProvider):
    label = "gemini"

    def _url(self, *, stream: bool) -> str:
        model = f"{self.base_url}/models/{quote(self.model.removeprefix('models/'), safe='')}"
        return f"{model}:streamGenerateContent?alt=sse" if stream else f"{model}:generateContent"

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["x-goog-api-key"] = self.api_key
        return headers

    # -- request -----------------------------------------------------------------------------

    def _fetches_image(self, url: str) -> bool:
        return not url.startswith(("data:", *FILE_URI_PREFIXES))

    def _parts(self, content: Any, where: str) -> list[dict]:
        parts = []
        for part in content_parts(content, where):
            if part["type"] == "text":
                parts.append({"text": part["text"]})
            elif part["url"].startswith(FILE_URI_PREFIXES):
                parts.append({"fileData": {"fileUri": part["url"]}})
            else:
                mime_type, data = inline_image(part["url"], where, self.label)
                parts.append({"inlineData": {"mimeType": mime_type, "data": data}})
        return parts

    def _contents(self, messages: list[dict]) -> tuple[list[str], list[dict]]:
        """The system texts and the conversation as Gemini contents."""
        names = tool_names(messages)
        system: list[str] = []
        contents: list[dict] = []
        for index, message in enumerate(messages):
            where = f"messages[{index}]"
            role, content = message.get("role"), message.get("content")
            if role in SYSTEM_ROLES:
                system.append(text_of(content, where))
                continue
            if role == "user":
                parts = self._parts(content, where)
            elif role == "assistant":
                role = "model"
                parts = self._parts(content, where) + [
                    {"functionCall": {"name": call["name"], "args": arguments_object(call["arguments"])}}
                    for call in assistant_calls(message, where)
                ]
            elif role == "tool":
                # Gemini matches a result to its call by the function's name.
                name = names.get(str(message.get("tool_call_id") or ""))
                if name is None:
                    logger.debug("%s: a tool result without its call in the history is dropped", where)
                    continue
                role = "user"
                parts = [{"functionResponse": {"name": name, "response": _result_object(text_of(content, where))}}]
            else:
                raise invalid_request(f"{where}.role {role!r} is not supported")
            if not parts:
                continue
            if contents and contents[-1]["role"] == role:
                contents[-1]["parts"].extend(parts)
            else:
                contents.append({"role": role, "parts": parts})
        return system, contents

    def _payload(self, body: dict[str, Any], *, stream: bool) -> dict[str, Any]:
        system, contents = self._contents(body["messages"])
        payload: dict[str, Any] = {"contents": contents}
        if any(system):
            payload["systemInstruction"] = {"parts": [{"text": "\n\n".join(text for text in system if text)}]}
        config: dict[str, Any] = {}
        for name, field in (("temperature", "temperature"), ("top_p", "topP")):
            if number(body, name) is not None:
                config[field] = body[name]
        limit = max_tokens(body)
        if limit:
            config["maxOutputTokens"] = limit
        stops = stop_sequences(body)
        if stops:
            config["stopSequences"] = stops
        response_format = wants_json(body)
        if response_format:
            config["responseMimeType"] = "application/json"
            schema = json_schema_of(response_format)
            if schema:
                # Without it Gemini answers JSON of any shape, which a client's parser refuses.
                config["responseSchema"] = gemini_schema(schema)
        if config:
            payload["generationConfig"] = config
        tools = functions(body)
        if tools:
            declarations = []
            for tool in tools:
                declaration = {"name": tool["name"], "description": tool["description"]}
                parameters = gemini_schema(tool["parameters"]) if tool["parameters"] else {}
                if parameters.get("properties"):
                    declaration["parameters"] = parameters
                declarations.append(declaration)
            payload["tools"] = [{"functionDeclarations": declarations}]
            choice = body.get("tool_choice")
            if choice is not None:
                named = forced_function(choice)
                if named is None and _TOOL_CHOICE_MODES.get(str(choice)) is None:
                    raise invalid_request('tool_choice must be "auto", "none", "required" or a named function')
                calling = (
                    {"mode": "ANY", "allowedFunctionNames": [named]} if named else {"mode": _TOOL_CHOICE_MODES[choice]}
                )
                payload["toolConfig"] = {"functionCallingConfig": calling}
        return payload

    # -- reply -------------------------------------------------------------------------------

    def _completion(self, reply: dict[str, Any]) -> dict[str, Any]:
        candidates = reply.get("candidates")
        if candidates is None and isinstance(reply.get("promptFeedback"), dict):
            # The prompt itself was blocked: no candidate at all.
            choices = [{"index": 0, "message": assistant_message("", []), "finish_reason": "content_filter"}]
        elif isinstance(candidates, list) and candidates:
            choices = []
            for position, candidate in enumerate(candidates):
                parts = _answer_parts(candidate)
                calls = [call for call in map(_call_of, parts) if call]
                text = "".join(p["text"] for p in parts if isinstance(p.get("text"), str))
                index = candidate.get("index", position) if isinstance(candidate, dict) else position
                reason = candidate.get("finishReason") if isinstance(candidate, dict) else None
                choices.append(
                    {
                        "index": index,
                        "message": assistant_message(text, calls),
                        "finish_reason": _finish(reason, bool(calls)),
                        "logprobs": None,
                    }
                )
        else:
            raise malformed(self.label)
        return completion_object(
            reply_id=str(reply.get("responseId") or new_id()),
            model=self.model,
            choices=choices,
            usage=_usage(reply.get("usageMetadata")),
        )

    async def _chunks(self, body: AsyncIterator[bytes]) -> AsyncIterator[dict]:
        out = Chunks(self.model)
        started, finish, usage = False, None, None
        calls = 0
        async for event in sse_events(body, self.label, self.api_key):
            if not started:
                out.id = str(event.get("responseId") or out.id)
                started = True
                yield out.start()
            # Every event carries the counts so far; the last ones are the call's.
            usage = event.get("usageMetadata") or usage
            candidates = event.get("candidates")
            if not isinstance(candidates, list):
                if isinstance(event.get("promptFeedback"), dict) and event["promptFeedback"].get("blockReason"):
                    finish = "content_filter"
                continue
            for candidate in candidates[:1]:
                for part in _answer_parts(candidate):
                    call = _call_of(part)
                    if call:
                        # Gemini sends each call whole: it is relayed as one delta.
                        yield out.delta({"tool_calls": [{"index": calls, **call}]})
                        calls += 1
                    elif isinstance(part.get("text"), str) and part["text"]:
                        yield out.delta({"content": part["text"]})
                reason = candidate.get("finishReason") if isinstance(candidate, dict) else None
                if reason:
                    finish = _finish(reason, calls > 0)
        if finish is None:
            raise ended_early(self.label)
        yield out.delta({}, finish_reason=finish)
        yield out.usage(_usage(usage))

    def _classify(self, status: int, error: dict | None) -> tuple[int, str, str | None]:
        error = error or {}
        code = error["status"].lower() if isinstance(error.get("status"), str) else None
        # Gemini answers a bad API key with 400 INVALID_ARGUMENT; to a client that is a 401.
        if status == 400 and "API_KEY_INVALID" in json.dumps(error.get("details") or []):
            status, code = 401, "invalid_api_key"
        return status, type_for_status(status), code
