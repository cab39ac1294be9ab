"""`/v1/responses`: OpenAI's Responses API answered by the chat pipeline. A request is translated
into a chat (`responses_input`), answered by :func:`complete_chat` (the same admission, limits,
budgets, grounding, routes, adapters and request log as `/v1/chat/completions`, on the row of
endpoint `responses`), and its answer translated back (`responses_output`, `responses_events`).
Stored responses (`store`, true by default) are read back, listed and deleted by a key of their
project only."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator

from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse

from gateway.clients import selectors, services
from gateway.clients.ledger import Call
from gateway.clients.models import Endpoint, Scope
from gateway.clients.responses_events import ResponseEvents, sse
from gateway.clients.responses_input import (
    FILE_SEARCH_RESULTS,
    ResponsesInput,
    chat_body,
    file_search_of,
    input_items,
    is_response_id,
    new_id,
    refuse_nul,
)
from gateway.clients.responses_output import FileSearch, response_of_chat
from gateway.clients.v1.chat import complete_chat
from gateway.clients.v1.endpoint import json_body, v1_endpoint, validated
from gateway.clients.v1.file_search import file_search_grounding
from ragmux.core.errors import InvalidInput

logger = logging.getLogger("ragmux.gateway.v1")

# The headers of the chat's answer a response passes on (the sources it was grounded on).
PASSED_HEADERS = ("x-ragmux-rag-hits", "x-ragmux-rag-sources")
SSE_DATA = b"data: "
MAX_LISTED = 100


class Turn:
    """One response being made: the validated request, the conversation before it, its input
    items, its id and time, and the file_search that grounded it."""

    def __init__(self, call: Call, data: dict, history: list[dict], items: list[dict]) -> None:
        self.call, self.data, self.history, self.items = call, data, history, items
        self.response_id, self.created_at = new_id("resp"), int(time.time())
        self.search: FileSearch | None = None

    async def keep(self, response: dict) -> None:
        if self.data["store"]:
            await services.response_save(
                project_id=self.call.project.pk,
                key_id=self.call.key.pk,
                history=self.history,
                items=self.items,
                response=response,
            )


def _passed_on(answer: HttpResponse, response: HttpResponse) -> HttpResponse:
    for name in PASSED_HEADERS:
        if name in answer:
            response[name] = answer[name]
    return response


@v1_endpoint(endpoint=Endpoint.RESPONSES, scope=Scope.CHAT, methods=("POST",))
async def create(request: HttpRequest, call: Call) -> HttpResponse:
    body = json_body(request)
    refuse_nul(body)
    data = validated(ResponsesInput, body)
    items = input_items(data["input"])
    history: list[dict] = []
    if data["previous_response_id"]:
        previous = await selectors.stored_response(project=call.project, response_id=data["previous_response_id"])
        history = previous.history + previous.input_items + previous.response["output"]
    turn = Turn(call, data, history, items)
    tool = file_search_of(data["tools"])
    with_results = FILE_SEARCH_RESULTS in data["include"]
    grounding = None if tool is None else await file_search_grounding(call, tool, with_results=with_results)
    answer = await complete_chat(call, chat_body(data, history, items), grounding)
    turn.search = None if grounding is None else grounding.search
    if data["stream"]:
        relayed = StreamingHttpResponse(_events(turn, answer), content_type="text/event-stream")
        relayed["X-Accel-Buffering"] = "no"
        return _passed_on(answer, relayed)
    response = response_of_chat(
        data, json.loads(answer.content), response_id=turn.response_id, created_at=turn.created_at, search=turn.search
    )
    await turn.keep(response)
    return _passed_on(answer, JsonResponse(response))


async def _events(turn: Turn, answer: StreamingHttpResponse) -> AsyncIterator[bytes]:
    """The chat's chunks as Responses events. The chat's relay settles the call; when its
    upstream fails mid-answer it sends an error frame and ends, which ends the response as
    `response.failed`."""
    model = turn.data["model"] or turn.call.model
    events = ResponseEvents(
        turn.data, response_id=turn.response_id, created_at=turn.created_at, model=model, search=turn.search
    )
    failed = False
    for event in events.opening():
        yield sse(event)
    async for frame in answer.streaming_content:
        payload = frame.removeprefix(SSE_DATA).strip()
        if payload == b"[DONE]":
            continue
        chunk = json.loads(payload)
        failed = failed or "error" in chunk
        for event in events.failed(chunk["error"]) if "error" in chunk else events.chunk(chunk):
            yield sse(event)
    if failed:
        return
    closing = events.finished()
    try:
        await turn.keep(closing[-1]["response"])
    except Exception:
        # The answer is whole and the client is waiting for it: it goes out, unstored.
        logger.exception("response %s could not be stored", turn.response_id)
    for event in closing:
        yield sse(event)


@v1_endpoint(endpoint=Endpoint.RESPONSES, scope=Scope.CHAT, methods=("GET", "DELETE"))
async def stored(request: HttpRequest, call: Call, response_id: str) -> HttpResponse:
    if request.method == "DELETE":
        found = is_response_id(response_id) and await services.response_delete(
            project_id=call.project.pk, response_id=response_id
        )
        if not found:
            # The selector's refusal, worded once.
            await selectors.stored_response(project=call.project, response_id=response_id)
        return JsonResponse({"id": response_id, "object": "response", "deleted": True})
    kept = await selectors.stored_response(project=call.project, response_id=response_id)
    return JsonResponse(kept.response)


def _page_query(request: HttpRequest) -> tuple[int, bool, str | None]:
    """`limit` (1 to 100, default 20), `order` (`desc` by default, as OpenAI's) and `after`."""
    limit = request.GET.get("limit", "20")
    if not (limit.isdecimal() and len(limit) <= len(str(MAX_LISTED)) and 1 <= int(limit) <= MAX_LISTED):
        raise InvalidInput(f"limit must be a whole number from 1 to {MAX_LISTED}", code="invalid_request")
    order = request.GET.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidInput("order must be asc or desc", code="invalid_request")
    return int(limit), order == "desc", request.GET.get("after")


@v1_endpoint(endpoint=Endpoint.RESPONSES, scope=Scope.CHAT, methods=("GET",))
async def listed_input_items(request: HttpRequest, call: Call, response_id: str) -> HttpResponse:
    limit, newest_first, after = _page_query(request)
    kept = await selectors.stored_response(project=call.project, response_id=response_id)
    items = list(reversed(kept.input_items)) if newest_first else kept.input_items
    ids = [item["id"] for item in items]
    start = ids.index(after) + 1 if after in ids else 0
    page = items[start : start + limit]
    return JsonResponse(
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": start + limit < len(items),
        }
    )
