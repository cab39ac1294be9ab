"""A `/v1/responses` request, read and turned into a chat: its fields checked, its input items
(and a previous response's) made chat messages, its function tools chat tools. Pure: no
database, no I/O, so each rule is tested on its own.

What we refuse is said with a 400 naming it: hosted tools we do not run, item and part types we
do not know, output formats OpenAI does not define. `file_search` is ours to run: its tool is
read here (:func:`file_search_of`) and answered by grounding the chat in its vector stores.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

from rest_framework import serializers

from gateway.clients.serializers import MAX_COMPLETION_TOKENS
from ragmux.core.errors import InvalidInput, validation_failed
from retrieval.serializers import FiltersField

# OpenAI's own limits on a response's metadata: 16 pairs, keys up to 64 characters, values 512.
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512
MAX_TOOLS = 128
RESPONSE_ID_MAX_LENGTH = 64
# Tools OpenAI runs on its side; we do not, and say so by name.
HOSTED_TOOLS = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "code_interpreter",
        "computer_use",
        "computer_use_preview",
        "image_generation",
        "mcp",
        "local_shell",
        "shell",
        "apply_patch",
    }
)
# OpenAI's bound on a file_search's results; the vector stores one search may name (ours).
MAX_FILE_SEARCH_RESULTS = 50
MAX_FILE_SEARCH_STORES = 10
# Where the search's results go in the output when the request's `include` names it.
FILE_SEARCH_RESULTS = "file_search_call.results"
INPUT_ROLES = ("user", "assistant", "system", "developer")
CHAT_ROLE = {"developer": "system"}


# The output formats a response can be asked for; a json_schema's name as OpenAI allows it.
TEXT_FORMATS = ("text", "json_object", "json_schema")
SCHEMA_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
RESPONSE_ID = re.compile(rf"[A-Za-z0-9_-]{{1,{RESPONSE_ID_MAX_LENGTH}}}")


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"


def is_response_id(text: str) -> bool:
    """Whether ``text`` could name a response (what else is asked for cannot be found)."""
    return RESPONSE_ID.fullmatch(text) is not None


class RankingOptionsInput(serializers.Serializer):
    """A file_search's `ranking_options`, checked and without effect: each vector store ranks
    (and reranks) by its own settings, and its scores are not on OpenAI's 0-to-1 scale that a
    `score_threshold` is written for."""

    ranker = serializers.ChoiceField(choices=("auto", "default-2024-11-15", "none"), required=False, allow_null=True)
    score_threshold = serializers.FloatField(required=False, allow_null=True, min_value=0, max_value=1)
    hybrid_search = serializers.DictField(required=False, allow_null=True)


class FileSearchInput(serializers.Serializer):
    """The `file_search` tool: the vector stores to search, how many results at most, a filter."""

    vector_store_ids = serializers.ListField(
        child=serializers.CharField(max_length=RESPONSE_ID_MAX_LENGTH),
        min_length=1,
        max_length=MAX_FILE_SEARCH_STORES,
    )
    max_num_results = serializers.IntegerField(
        required=False, allow_null=True, default=None, min_value=1, max_value=MAX_FILE_SEARCH_RESULTS
    )
    filters = FiltersField(required=False, allow_null=True, default=None)
    ranking_options = RankingOptionsInput(required=False, allow_null=True, default=None)


class ResponsesInput(serializers.Serializer):
    """The fields of a `/v1/responses` request we read; others (`reasoning`, `truncation`,
    `user`) are accepted and have no effect."""

    model = serializers.CharField(required=False, allow_blank=True, default="", max_length=256)
    input = serializers.JSONField(error_messages={"required": "input is required"})
    instructions = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, default=None, trim_whitespace=False
    )
    tools = serializers.ListField(child=serializers.DictField(), required=False, default=list, max_length=MAX_TOOLS)
    tool_choice = serializers.JSONField(required=False, default="auto")
    parallel_tool_calls = serializers.BooleanField(required=False, allow_null=True, default=None)
    max_output_tokens = serializers.IntegerField(
        required=False, allow_null=True, default=None, min_value=1, max_value=MAX_COMPLETION_TOKENS
    )
    temperature = serializers.FloatField(required=False, allow_null=True, default=None, min_value=0, max_value=2)
    top_p = serializers.FloatField(required=False, allow_null=True, default=None, min_value=0, max_value=1)
    metadata = serializers.DictField(
        child=serializers.CharField(max_length=MAX_METADATA_VALUE, allow_blank=True, trim_whitespace=False),
        required=False,
        allow_null=True,
        default=dict,
    )
    stream = serializers.BooleanField(required=False, default=False)
    store = serializers.BooleanField(required=False, allow_null=True, default=True)
    previous_response_id = serializers.CharField(
        required=False, allow_null=True, default=None, max_length=RESPONSE_ID_MAX_LENGTH
    )
    text = serializers.DictField(required=False, allow_null=True, default=None)
    include = serializers.ListField(
        child=serializers.CharField(max_length=128), required=False, allow_null=True, default=list, max_length=32
    )

    def validate_include(self, include: list[str] | None) -> list[str]:
        return include or []

    def validate_metadata(self, metadata: dict | None) -> dict:
        metadata = metadata or {}
        if len(metadata) > MAX_METADATA_PAIRS:
            raise serializers.ValidationError(f"at most {MAX_METADATA_PAIRS} pairs")
        if any(len(key) > MAX_METADATA_KEY for key in metadata):
            raise serializers.ValidationError(f"keys are at most {MAX_METADATA_KEY} characters")
        return metadata

    def validate_text(self, text: dict | None) -> dict | None:
        if not text or text.get("format") is None:
            return None
        return {"format": _text_format(text["format"])}

    def validate_store(self, store: bool | None) -> bool:
        return store is not False


def _text_format(given: Any) -> dict:
    """`text.format`, checked: `text`, `json_object`, or `json_schema` with its `name`, `schema`
    and optional `description` and `strict`, as OpenAI defines them."""
    if not isinstance(given, dict) or given.get("type") not in TEXT_FORMATS:
        raise serializers.ValidationError(f"format.type must be one of {', '.join(TEXT_FORMATS)}")
    if given["type"] != "json_schema":
        return {"type": given["type"]}
    name, schema = given.get("name"), given.get("schema")
    if not isinstance(name, str) or SCHEMA_NAME.fullmatch(name) is None:
        raise serializers.ValidationError("format.name must be 1 to 64 letters, digits, underscores or dashes")
    if not isinstance(schema, dict):
        raise serializers.ValidationError("format.schema must be a JSON schema object")
    checked = {"type": "json_schema", "name": name, "schema": schema}
    for key, kind in (("description", str), ("strict", bool)):
        if given.get(key) is not None:
            if not isinstance(given[key], kind):
                raise serializers.ValidationError(f"format.{key} must be a {kind.__name__}")
            checked[key] = given[key]
    return checked


def chat_response_format(text: dict | None) -> dict | None:
    """A checked `text` as a chat's `response_format`; None for plain text."""
    given = (text or {}).get("format") or {"type": "text"}
    if given["type"] == "json_schema":
        return {"type": "json_schema", "json_schema": {key: value for key, value in given.items() if key != "type"}}
    return {"type": "json_object"} if given["type"] == "json_object" else None


def _refused(message: str, field: str) -> InvalidInput:
    return InvalidInput(message, field=field, code="invalid_request", param=field)


def _unsupported(kind: Any, field: str) -> InvalidInput:
    return _refused(f"{field}.type {str(kind)[:40]!r} is not supported", f"{field}.type")


def _text(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise _refused(f"{field} must be a string", field)
    return value


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(key) or _holds_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_holds_nul(item) for item in value)
    return False


def refuse_nul(body: dict) -> None:
    """A NUL character anywhere in the request is refused: a stored response could not keep it
    (PostgreSQL's text and jsonb refuse it), and no provider needs one."""
    if _holds_nul(body):
        raise InvalidInput("the request must not contain NUL characters (\\u0000)", code="invalid_request")


def _part(part: Any, field: str) -> dict:
    """One content part, checked and kept in the Responses shape."""
    if not isinstance(part, dict):
        raise _refused(f"{field} must be an object", field)
    kind = part.get("type")
    if kind in ("input_text", "output_text"):
        return {"type": kind, "text": _text(part.get("text"), f"{field}.text")}
    if kind == "input_image":
        url = _text(part.get("image_url"), f"{field}.image_url")
        detail = part.get("detail") or "auto"
        if detail not in ("auto", "low", "high"):
            raise _refused(f"{field}.detail must be auto, low or high", f"{field}.detail")
        return {"type": kind, "image_url": url, "detail": detail}
    if kind == "refusal":
        return {"type": kind, "refusal": _text(part.get("refusal"), f"{field}.refusal")}
    raise _unsupported(kind, field)


def _item_id(item: dict, field: str, prefix: str) -> str:
    """The item's own id (kept, so `input_items` lists it as sent), else a new one."""
    given = item.get("id")
    return new_id(prefix) if given is None else _text(given, f"{field}.id")


def _message(item: dict, field: str) -> dict:
    role = item.get("role")
    if role not in INPUT_ROLES:
        raise _refused(f"{field}.role must be one of {', '.join(INPUT_ROLES)}", f"{field}.role")
    content = item.get("content")
    if isinstance(content, str):
        parts = [{"type": "output_text" if role == "assistant" else "input_text", "text": _text(content, field)}]
    elif isinstance(content, list):
        parts = [_part(part, f"{field}.content[{n}]") for n, part in enumerate(content)]
    else:
        raise _refused(f"{field}.content must be a string or a list of parts", f"{field}.content")
    return {"type": "message", "id": _item_id(item, field, "msg"), "role": role, "content": parts}


def _function_call(item: dict, field: str) -> dict:
    return {
        "type": "function_call",
        "id": _item_id(item, field, "fc"),
        "call_id": _text(item.get("call_id"), f"{field}.call_id"),
        "name": _text(item.get("name"), f"{field}.name"),
        "arguments": _text(item.get("arguments"), f"{field}.arguments"),
        "status": "completed",
    }


def _function_call_output(item: dict, field: str) -> dict:
    output = item.get("output")
    if isinstance(output, list):
        # A tool's output is read as its text parts (chat tool messages carry text only).
        output = "".join(_part(part, f"{field}.output").get("text", "") for part in output)
    return {
        "type": "function_call_output",
        "id": _item_id(item, field, "fco"),
        "call_id": _text(item.get("call_id"), f"{field}.call_id"),
        "output": _text(output, f"{field}.output"),
    }


def _file_search_call(item: dict, field: str) -> dict:
    """A search of an earlier turn, sent back as input (`input=[*response.output, ...]`): kept for
    the input items, not sent upstream (its passages were that turn's context)."""
    queries = item.get("queries") or []
    if not isinstance(queries, list):
        raise _refused(f"{field}.queries must be a list", f"{field}.queries")
    return {
        "type": "file_search_call",
        "id": _item_id(item, field, "fs"),
        "status": "completed",
        "queries": [_text(query, f"{field}.queries[{n}]") for n, query in enumerate(queries)],
        "results": None,
    }


def input_items(value: Any) -> list[dict]:
    """The request's `input` as items, each with an id: a string is one user message."""
    if isinstance(value, str):
        return [_message({"role": "user", "content": value}, "input")]
    if not isinstance(value, list) or not value:
        raise _refused("input must be a string or a non-empty list of items", "input")
    items = []
    for n, item in enumerate(value):
        field = f"input[{n}]"
        if not isinstance(item, dict):
            raise _refused(f"{field} must be an object", field)
        kind = item.get("type", "message")
        if kind == "message":
            items.append(_message(item, field))
        elif kind == "function_call":
            items.append(_function_call(item, field))
        elif kind == "function_call_output":
            items.append(_function_call_output(item, field))
        elif kind == "file_search_call":
            items.append(_file_search_call(item, field))
        else:
            raise _unsupported(kind, field)
    return items


def _chat_part(part: dict) -> dict:
    if part["type"] == "input_image":
        return {"type": "image_url", "image_url": {"url": part["image_url"], "detail": part["detail"]}}
    return {"type": "text", "text": part.get("text", part.get("refusal", ""))}


def _chat_message(item: dict) -> dict:
    role, parts = CHAT_ROLE.get(item["role"], item["role"]), item["content"]
    if role != "user" or all(part["type"] != "input_image" for part in parts):
        # Text only: one string, which every provider adapter reads.
        return {"role": role, "content": "".join(_chat_part(part)["text"] for part in parts)}
    return {"role": role, "content": [_chat_part(part) for part in parts]}


def chat_messages(instructions: str | None, items: list[dict]) -> list[dict]:
    """The items of a conversation as chat messages: a run of function calls is one assistant
    message's `tool_calls`, each output a `tool` message."""
    messages = [{"role": "system", "content": instructions}] if instructions else []
    for item in items:
        if item["type"] == "message":
            messages.append(_chat_message(item))
        elif item["type"] == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})
        elif item["type"] == "function_call":
            function = {"name": item["name"], "arguments": item["arguments"]}
            if not messages or messages[-1]["role"] != "assistant":
                messages.append({"role": "assistant", "content": None})
            messages[-1].setdefault("tool_calls", []).append(
                {"id": item["call_id"], "type": "function", "function": function}
            )
    return messages


def _tool_kind(tool: dict, field: str) -> str:
    kind = tool.get("type")
    if not isinstance(kind, str):
        raise _refused(f"{field}.type must be a string", f"{field}.type")
    if kind in HOSTED_TOOLS:
        raise _refused(f"the {kind} tool is not supported: this gateway does not run hosted tools", field)
    if kind not in ("function", "file_search"):
        raise _unsupported(kind, field)
    return kind


def file_search_of(tools: list[dict]) -> dict | None:
    """The request's `file_search` tool, checked (its `filters` parsed), or None; one at most."""
    found = [n for n, tool in enumerate(tools) if tool.get("type") == "file_search"]
    if not found:
        return None
    if len(found) > 1:
        raise _refused("at most one file_search tool", f"tools[{found[1]}]")
    data = FileSearchInput(data=tools[found[0]])
    if not data.is_valid():
        raise validation_failed({f"tools[{found[0]}]": data.errors}, code="invalid_request")
    return data.validated_data


def chat_tools(tools: list[dict]) -> list[dict]:
    """Function tools as chat tools (a `file_search` is run by us, not offered to the model); any
    other tool is refused by name."""
    chat = []
    for n, tool in enumerate(tools):
        field = f"tools[{n}]"
        if _tool_kind(tool, field) != "function":
            continue
        function = {"name": _text(tool.get("name"), f"{field}.name")}
        if tool.get("description") is not None:
            function["description"] = _text(tool["description"], f"{field}.description")
        parameters = tool.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise _refused(f"{field}.parameters must be an object", f"{field}.parameters")
        function["parameters"] = parameters or {"type": "object", "properties": {}}
        if isinstance(tool.get("strict"), bool):
            function["strict"] = tool["strict"]
        chat.append({"type": "function", "function": function})
    return chat


def chat_tool_choice(choice: Any, tools: list[dict]) -> Any:
    """The chat's `tool_choice`. Naming `file_search` asks for the search, which always runs when
    the tool is given: the model then chooses among the functions as with `auto`."""
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": _text(choice.get("name"), "tool_choice.name")}}
    if isinstance(choice, dict) and _tool_kind(choice, "tool_choice") == "file_search":
        if any(tool.get("type") == "file_search" for tool in tools):
            return "auto"
        raise _refused("tool_choice names file_search, which tools does not hold", "tool_choice")
    raise _refused('tool_choice must be "auto", "none", "required" or a named function', "tool_choice")


def chat_body(data: dict, history: list[dict], items: list[dict]) -> dict:
    """The chat request that answers a response: its conversation (``history`` then ``items``),
    tools and sampling, streamed with usage when the response is."""
    body: dict[str, Any] = {"model": data["model"], "messages": chat_messages(data["instructions"], history + items)}
    tools = chat_tools(data["tools"])
    choice = chat_tool_choice(data["tool_choice"], data["tools"])
    if tools:
        body["tools"], body["tool_choice"] = tools, choice
        if data["parallel_tool_calls"] is not None:
            body["parallel_tool_calls"] = data["parallel_tool_calls"]
    for ours, theirs in (("max_output_tokens", "max_completion_tokens"), ("temperature", "temperature")):
        if data[ours] is not None:
            body[theirs] = data[ours]
    if data["top_p"] is not None:
        body["top_p"] = data["top_p"]
    response_format = chat_response_format(data["text"])
    if response_format:
        body["response_format"] = response_format
    if data["stream"]:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body
