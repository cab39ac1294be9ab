"""A chat's answer as a `/v1/responses` `response` object: its text a `message` item with one
`output_text` part, each tool call a `function_call` item, its usage in input and output tokens,
and `incomplete` when the token limit cut it; a `file_search` that grounded it a
`file_search_call` item first, and the passages the text cites `file_citation` annotations of its
part. Pure: shared by the whole answer and the stream (`responses_events`), tested without a
database."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.clients.responses_input import new_id
from retrieval.citations import markers

# Why a chat stopped, when it did not finish: the reason a `response` gives in
# `incomplete_details`.
INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}


def message_item(item_id: str, text: str, status: str = "completed", annotations: Sequence[dict] = ()) -> dict:
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": [text_part(text, annotations)] if status == "completed" else [],
    }


def text_part(text: str, annotations: Sequence[dict] = ()) -> dict:
    return {"type": "output_text", "text": text, "annotations": list(annotations)}


def file_search_item(item_id: str, queries: list[str], results: list[dict] | None, status: str = "completed") -> dict:
    return {"type": "file_search_call", "id": item_id, "status": status, "queries": queries, "results": results}


@dataclass(frozen=True)
class FileSearch:
    """The `file_search` that grounded a response: its output item, and the file of each passage
    put in the context, ``files[n - 1]`` (file id, filename) for the passage labelled ``[n]``."""

    item: dict
    files: Sequence[tuple[str, str]]

    def annotations(self, text: str) -> list[dict]:
        """A `file_citation` for each place ``text`` cites a passage (`index`: where its marker
        is), one per file and place when a marker names two passages of one file."""
        cited: dict[tuple[str, int], dict] = {}
        for marker in markers(text, len(self.files)):
            file_id, filename = self.files[marker.number - 1]
            citation = {"type": "file_citation", "file_id": file_id, "filename": filename, "index": marker.index}
            cited.setdefault((file_id, marker.index), citation)
        return list(cited.values())


def annotations_of(search: FileSearch | None, text: str) -> list[dict]:
    return [] if search is None else search.annotations(text)


def function_call_item(item_id: str, call_id: str, name: str, arguments: str, status: str = "completed") -> dict:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def listed(value: Any) -> list:
    """``value`` when it is a list, else none: an upstream's answer is read part by part."""
    return value if isinstance(value, list) else []


def _detail(usage: dict, details: str, name: str) -> int:
    """A count from one of a chat usage's details objects; 0 when it has none."""
    found = usage.get(details)
    value = found.get(name) if isinstance(found, dict) else None
    return value if isinstance(value, int) else 0


def usage_of(chat_usage: Any) -> dict | None:
    """A chat's usage in the Responses shape, its prompt-cache reads and writes and its reasoning
    tokens (Gemini's thoughts) included; None when the chat reported none."""
    if not isinstance(chat_usage, dict):
        return None
    prompt, completion = chat_usage.get("prompt_tokens"), chat_usage.get("completion_tokens")
    if not (isinstance(prompt, int) and isinstance(completion, int)):
        return None
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cached_tokens": _detail(chat_usage, "prompt_tokens_details", "cached_tokens"),
            "cache_write_tokens": _detail(chat_usage, "prompt_tokens_details", "cache_write_tokens"),
        },
        "output_tokens": completion,
        "output_tokens_details": {
            "reasoning_tokens": _detail(chat_usage, "completion_tokens_details", "reasoning_tokens")
        },
        "total_tokens": prompt + completion,
    }


def output_of(message: Any, search: FileSearch | None = None) -> list[dict]:
    """A chat's message as output items: the search that grounded it, its text, its tool calls."""
    message = message if isinstance(message, dict) else {}
    items = [] if search is None else [search.item]
    text = message.get("content")
    if isinstance(text, str) and text:
        items.append(message_item(new_id("msg"), text, annotations=annotations_of(search, text)))
    for call in listed(message.get("tool_calls")):
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            arguments = function.get("arguments")
            arguments = arguments if isinstance(arguments, str) else ""
            call_id = str(call.get("id") or new_id("call"))
            items.append(function_call_item(new_id("fc"), call_id, str(function.get("name") or ""), arguments))
    return items


def output_text(output: list[dict]) -> str:
    return "".join(
        part["text"]
        for item in output
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )


def response_object(
    request: dict, *, response_id: str, created_at: int, model: str, output: list[dict], **state: Any
) -> dict:
    """The `response` object of ``request`` (the validated request): ``state`` may say its
    `status` (default completed), `usage`, `error` and why it is incomplete
    (`finish_reason`, the chat's)."""
    finish_reason = state.get("finish_reason")
    reason = INCOMPLETE_REASONS.get(finish_reason) if isinstance(finish_reason, str) else None
    status = state.get("status") or ("incomplete" if reason else "completed")
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "error": state.get("error"),
        "incomplete_details": {"reason": reason} if reason and status == "incomplete" else None,
        "instructions": request["instructions"],
        "max_output_tokens": request["max_output_tokens"],
        "model": model,
        "output": output,
        "output_text": output_text(output),
        "parallel_tool_calls": request["parallel_tool_calls"] is not False,
        "previous_response_id": request["previous_response_id"],
        "store": request["store"],
        "temperature": request["temperature"],
        "text": request["text"] or {"format": {"type": "text"}},
        "tool_choice": request["tool_choice"],
        "tools": request["tools"],
        "top_p": request["top_p"],
        "truncation": "disabled",
        "metadata": request["metadata"],
        "usage": state.get("usage"),
    }


def response_of_chat(
    request: dict, reply: dict, *, response_id: str, created_at: int, search: FileSearch | None = None
) -> dict:
    """A whole chat answer as a `response`."""
    choices = listed(reply.get("choices"))
    choice = choices[0] if choices and isinstance(choices[0], dict) else {}
    return response_object(
        request,
        response_id=response_id,
        created_at=created_at,
        model=str(reply.get("model") or request["model"]),
        output=output_of(choice.get("message"), search),
        usage=usage_of(reply.get("usage")),
        finish_reason=choice.get("finish_reason"),
    )
