"""Rerank routes of the fake upstream, in the providers' own wire formats.

- ``cohere.rerank``: ``POST /v2/rerank`` (Cohere v2) takes ``{model, query, documents, top_n}`` and
  answers ``{id, results: [{index, relevance_score}], meta: {api_version, billed_units:
  {search_units}, tokens: {input_tokens, output_tokens}}}``; errors are ``{"message": ...}``.
- ``voyage.rerank``: ``POST /v1/rerank`` (Voyage v1) takes ``{model, query, documents, top_k,
  truncation}`` and answers ``{object: "list", data: [{index, relevance_score}], model, usage:
  {total_tokens}}``; errors are ``{"detail": ...}``.

By default both rank the documents in reverse order (like the original's e2e mock, so a test or a
bench sees the order change), cut to the request's ``top_n`` / ``top_k``. The ``rerank_results``
knob sets the indices answered instead, as given (repeats and out-of-range ones included);
``omit_usage`` leaves out the billed units and token counts. Tokens are one a word.

The OpenAI chat route answers a listwise rerank prompt (one holding :data:`RERANK_PROMPT_MARK`)
with the passage numbers of its ``[n] `` lines in reverse order.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.fakes.upstream import FakeUpstream, Knobs

# What the original's mock looks for in a rerank prompt (ours says it too).
RERANK_PROMPT_MARK = "Return only a JSON array"
_PASSAGE_LINE = re.compile(r"^\[(\d+)\] ", re.MULTILINE)


def rerank_prompt_numbers(payload: dict) -> list[int]:
    """The passage numbers a rerank prompt lists, in its order."""
    numbers: list[int] = []
    for message in payload.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            numbers += [int(n) for n in _PASSAGE_LINE.findall(content)]
    return numbers


def _reply(body: object, status: int = 200):
    return status, {"Content-Type": "application/json"}, json.dumps(body).encode()


def _order(documents: list, limit: object, knobs: Knobs) -> list[int]:
    if knobs.rerank_results is not None:
        return list(knobs.rerank_results)
    order = list(reversed(range(len(documents))))
    return order[:limit] if isinstance(limit, int) and limit > 0 else order


def _scored(order: list[int]) -> list[dict]:
    return [{"index": index, "relevance_score": round(0.99 - 0.01 * rank, 4)} for rank, index in enumerate(order)]


def _words(query: object, documents: list) -> int:
    return sum(len(str(text).split()) for text in [query, *documents])


def register_rerank_routes(upstream: FakeUpstream) -> None:
    @upstream.route(
        "cohere.rerank", "POST", r"/v2/rerank", error_body=lambda status, knobs: {"message": f"fake {status}"}
    )
    def cohere(up, payload, match, knobs):
        documents = payload.get("documents") or []
        if knobs.malformed == "wrong_shape":
            return _reply({"id": "fake", "data": []})
        meta: dict = {"api_version": {"version": "2"}}
        if not knobs.omit_usage:
            meta["billed_units"] = {"search_units": 1}
            meta["tokens"] = {"input_tokens": _words(payload.get("query"), documents), "output_tokens": 0}
        return _reply(
            {"id": "fake-rerank", "results": _scored(_order(documents, payload.get("top_n"), knobs)), "meta": meta}
        )

    @upstream.route(
        "voyage.rerank", "POST", r"/v1/rerank", error_body=lambda status, knobs: {"detail": f"fake {status}"}
    )
    def voyage(up, payload, match, knobs):
        documents = payload.get("documents") or []
        if knobs.malformed == "wrong_shape":
            return _reply({"object": "list", "results": []})
        reply: dict = {
            "object": "list",
            "data": _scored(_order(documents, payload.get("top_k"), knobs)),
            "model": payload.get("model"),
        }
        if not knobs.omit_usage:
            reply["usage"] = {"total_tokens": _words(payload.get("query"), documents)}
        return _reply(reply)
