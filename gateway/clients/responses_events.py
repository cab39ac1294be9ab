"""A streamed chat, chunk by chunk, as OpenAI's typed Responses events, in their order:
`response.created`, `response.in_progress`, then the `file_search_call` item of a search that
grounded the answer (`output_item.added`, `file_search_call.in_progress`, `.searching`,
`.completed`, `output_item.done`: the search has run by then), then per output item
`output_item.added`, its content part or argument deltas (a message's `file_citation`
annotations, once its text is whole) and their `done` events, `output_item.done`; last
`response.completed` (or `response.incomplete` when the token limit cut it, `response.failed`
when the upstream failed). Every event has its `sequence_number`. Pure: tested without a
server."""

from __future__ import annotations

import json
from typing import Any

from gateway.clients.responses_input import new_id
from gateway.clients.responses_output import (
    FileSearch,
    annotations_of,
    file_search_item,
    function_call_item,
    listed,
    message_item,
    response_object,
    text_part,
    usage_of,
)


def sse(event: dict) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n".encode()


class ResponseEvents:
    """The events of one response; :meth:`response` is its object as it stands."""

    def __init__(
        self, request: dict, *, response_id: str, created_at: int, model: str, search: FileSearch | None = None
    ) -> None:
        self.request, self.response_id, self.created_at, self.model = request, response_id, created_at, model
        self.search = search
        self.sequence = 0
        self.output: list[dict] = []  # the items done
        self.open: dict | None = None  # the item being written, with its text or arguments
        self.calls: dict[int, dict] = {}  # the chat's tool call index -> its function_call item
        self.usage: dict | None = None
        self.finish_reason: str | None = None

    def _event(self, kind: str, **fields: Any) -> dict:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def response(self, status: str | None = None, error: dict | None = None) -> dict:
        return response_object(
            self.request,
            response_id=self.response_id,
            created_at=self.created_at,
            model=self.model,
            output=list(self.output),
            usage=self.usage,
            finish_reason=self.finish_reason,
            status=status,
            error=error,
        )

    def opening(self) -> list[dict]:
        events = [
            self._event("response.created", response=self.response("in_progress")),
            self._event("response.in_progress", response=self.response("in_progress")),
        ]
        return events + self._searched() if self.search is not None else events

    def _searched(self) -> list[dict]:
        """The search's item, from added to done."""
        item, where = self.search.item, {"item_id": self.search.item["id"], "output_index": len(self.output)}
        started = file_search_item(item["id"], [], None, status="in_progress")
        events = [self._event("response.output_item.added", output_index=len(self.output), item=started)]
        for stage in ("in_progress", "searching", "completed"):
            events.append(self._event(f"response.file_search_call.{stage}", **where))
        events.append(self._event("response.output_item.done", output_index=len(self.output), item=item))
        self.output.append(item)
        return events

    def chunk(self, chunk: dict) -> list[dict]:
        self.usage = usage_of(chunk.get("usage")) or self.usage
        events: list[dict] = []
        # The relay passes an upstream's chunks on as they came: each part is checked for its type.
        for choice in listed(chunk.get("choices")):
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
            if isinstance(delta.get("content"), str) and delta["content"]:
                events += self._text(delta["content"])
            for call in listed(delta.get("tool_calls")):
                if isinstance(call, dict):
                    events += self._call(call)
            if isinstance(choice.get("finish_reason"), str):
                self.finish_reason = choice["finish_reason"]
        return events

    def _text(self, text: str) -> list[dict]:
        events = []
        if self.open is None or self.open["type"] != "message":
            events += self._close()
            self.open = message_item(new_id("msg"), "", status="in_progress")
            events.append(self._event("response.output_item.added", output_index=len(self.output), item=self.open))
            self.open = {**self.open, "text": ""}
            events.append(self._event("response.content_part.added", **self._where(), part=text_part("")))
        self.open["text"] += text
        events.append(self._event("response.output_text.delta", **self._where(), delta=text, logprobs=[]))
        return events

    def _where(self, content: bool = True) -> dict:
        where = {"item_id": self.open["id"], "output_index": len(self.output)}
        return {**where, "content_index": 0} if content else where

    def _call(self, call: dict) -> list[dict]:
        events = []
        index = call.get("index") if isinstance(call.get("index"), int) else 0
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        if index not in self.calls:
            events += self._close()
            call_id = str(call.get("id") or new_id("call"))
            item = function_call_item(new_id("fc"), call_id, str(function.get("name") or ""), "", "in_progress")
            self.calls[index] = self.open = item
            events.append(self._event("response.output_item.added", output_index=len(self.output), item=dict(item)))
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments and self.open is self.calls[index]:
            self.open["arguments"] += arguments
            events.append(self._event("response.function_call_arguments.delta", **self._where(False), delta=arguments))
        return events

    def _close(self) -> list[dict]:
        """The open item's `done` events; it joins the output."""
        if self.open is None:
            return []
        item, events = self.open, []
        if item["type"] == "message":
            text = item.pop("text")
            annotations = annotations_of(self.search, text)
            for number, annotation in enumerate(annotations):
                events.append(
                    self._event(
                        "response.output_text.annotation.added",
                        **self._where(),
                        annotation_index=number,
                        annotation=annotation,
                    )
                )
            events.append(self._event("response.output_text.done", **self._where(), text=text, logprobs=[]))
            part = text_part(text, annotations)
            events.append(self._event("response.content_part.done", **self._where(), part=part))
            item = message_item(item["id"], text, annotations=annotations)
        else:
            item["status"] = "completed"
            events.append(
                self._event(
                    "response.function_call_arguments.done",
                    **self._where(False),
                    name=item["name"],
                    arguments=item["arguments"],
                )
            )
        events.append(self._event("response.output_item.done", output_index=len(self.output), item=item))
        self.output.append(item)
        self.open = None
        return events

    def finished(self) -> list[dict]:
        events = self._close()
        final = self.response()
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        return [*events, self._event(kind, response=final)]

    def failed(self, error: dict) -> list[dict]:
        """The upstream failed mid-answer: the items so far, then `response.failed` with the
        error (`code`, `message`) as OpenAI's envelope has it."""
        events = self._close()
        failure = {"code": str(error.get("code") or "server_error"), "message": str(error.get("message") or "")}
        return [*events, self._event("response.failed", response=self.response("failed", failure))]
