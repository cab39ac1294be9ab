"""Rerank providers behind one interface.

``reranker.rerank(query, passages, top_n=n)`` makes one upstream call and answers which passages
are most relevant, best first, as indices into ``passages`` with a relevance score, and what the
call spent (tokens, and Cohere's search units) so that it can be priced by the connection that
ran it. ``await reranker.rerank_async(...)`` is the same call made from the event loop (the
client API), ended when its caller is cancelled. Every call goes out through the one hardened
outbound client (``gateway.connections.http``).

Three backends, as a store's ``rerank_backend`` names them: ``cohere`` (Cohere's v2 rerank API,
a ``cohere_rerank`` connection), ``voyage`` (Voyage's v1 rerank API, a ``voyage_rerank``
connection) and ``llm`` (a chat connection asked, in one listwise prompt, for the passage numbers
in order). What the ``llm`` prompt says is the caller's (retrieval writes it, with the same
neutralisation as the context it injects); reading the model's answer is done here.

A ranking may omit passages (a ``top_n`` below their count, or a model that names only some);
the caller decides what happens to those. Failures: :class:`NoRerank` when the connection cannot
rerank with the backend; ``UpstreamTimeout`` after the timeout; :class:`RerankUnreadable` when the
reply names no passage we sent; any other ``UpstreamFailed`` for the rest.
"""

from __future__ import annotations

import asyncio
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from django.conf import settings

from gateway.connections import http
from gateway.connections.credentials import open_api_key
from gateway.connections.models import (
    DEFAULT_BASE_URLS,
    RERANK_API_PROVIDERS,
    Capability,
    ModelConnection,
    why_cannot,
)
from gateway.connections.pricing import DEFAULT_SEARCH_UNITS
from gateway.connections.providers.chat import NoChat, chat_provider
from gateway.connections.providers.chat_interface import ChatProvider
from gateway.connections.providers.embeddings import RETRYABLE_STATUSES, estimate_tokens
from gateway.connections.providers.upstream_errors import json_answer, malformed
from ragmux.core.crypto import DecryptionFailed
from ragmux.core.errors import Conflict, UpstreamFailed, UpstreamTimeout

LLM_BACKEND = "llm"
# Seconds one rerank call may take, by backend (the seed's); RERANK_TIMEOUT overrides both.
DEFAULT_TIMEOUTS = {LLM_BACKEND: 10.0, "cohere": 5.0, "voyage": 5.0}
# Characters of each passage sent, by backend: a listwise prompt holds every candidate at once.
PASSAGE_CHARS = {LLM_BACKEND: 800, "cohere": 4000, "voyage": 4000}
# A number longer than this in a model's answer is no passage number (and int() of a huge one
# is refused by Python anyway).
_PASSAGE_NUMBER = re.compile(r"\d{1,6}")
# A ranking as the prompt asks for it: numbers, brackets, quotes, commas and spaces only.
_NUMBERS_ONLY = re.compile(r"[\d\s\[\],\"']*")
_CODE_FENCE = re.compile(r"^```[a-z]*\s*|\s*```$")

# Builds the chat messages of a listwise rerank from the query and the (already cut) passages.
ListwisePrompt = Callable[[str, Sequence[str]], list[dict[str, Any]]]


class NoRerank(Conflict):
    """The connection cannot rerank with the backend: its provider type does not fit, or its API
    key does not decrypt under this server's encryption key."""

    code = "rerank_unavailable"


class RerankUnreadable(UpstreamFailed):
    """The reranker answered, but its reply names none of the passages it was given. ``spent`` is
    what the reply said the call cost (an estimate where it said nothing): billed all the same."""

    code = "rerank_unparseable"
    spent: Reranked | None = None


@dataclass(frozen=True)
class Ranked:
    index: int
    relevance_score: float


@dataclass(frozen=True)
class Reranked:
    """A ranking, best first, and what it cost."""

    ranking: list[Ranked]
    # Tokens the call spent: the upstream's count when it reported one, else an estimate.
    input_tokens: int
    output_tokens: int
    tokens_reported: bool
    # Cohere's billed search units; None for the backends that bill by token.
    search_units: int | None = None

    @property
    def order(self) -> list[int]:
        return [item.index for item in self.ranking]

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def estimated_rerank(backend: str, query: str, documents: Sequence[str]) -> Reranked:
    """What a rerank with ``backend`` is expected to spend, for a call not answered (yet): its
    passages as the backend cuts them (characters / 4) and, for a chat model, the longest answer
    it may write."""
    cut = PASSAGE_CHARS[backend]
    return Reranked(
        ranking=[],
        input_tokens=estimate_tokens([query, *(document[:cut] for document in documents)]),
        output_tokens=settings.RERANK_MAX_TOKENS if backend == LLM_BACKEND else 0,
        tokens_reported=False,
    )


def _ranked(spent: Reranked, rank: Callable[[], list[Ranked]]) -> Reranked:
    """``spent`` with the ranking ``rank`` reads; a reply that names no passage still cost what it
    reported, carried on the failure."""
    try:
        ranking = rank()
    except RerankUnreadable as exc:
        exc.spent = spent
        raise
    return replace(spent, ranking=ranking)


def passage_numbers(text: str, count: int) -> list[int]:
    """The passages (0-based) a model's answer ranks, in its order: the numbers it writes (1-based,
    as the prompt numbers them), as the JSON array asked for ("[3, 1, 2]", in a code fence or not)
    or a bare list ("3, 1, 2", "[3] [1] [2]"). Repeated and out-of-range numbers are dropped.

    :class:`RerankUnreadable` for anything else: prose that happens to hold a number ("passage [1]
    is off topic") is no ranking, nor is an answer naming fewer than two passages when two or
    more were sent (one passage scored is no order)."""
    answer = _CODE_FENCE.sub("", text.strip())
    if not _NUMBERS_ONLY.fullmatch(answer):
        shown = " ".join(text.split())
        raise RerankUnreadable(
            f"the reranking model's answer is not a list of passage numbers: “{shown[:80]}"
            f"{'…' if len(shown) > 80 else ''}”"
        )
    named = (int(match) for match in _PASSAGE_NUMBER.findall(answer))
    order = list(dict.fromkeys(n - 1 for n in named if 1 <= n <= count))
    if len(order) < min(2, count):
        raise RerankUnreadable(
            f"the reranking model's answer ranks {len(order)} of the {count} passages (between 1 and {count})"
        )
    return order


def _index_of(item: object, count: int) -> int | None:
    index = item.get("index") if isinstance(item, dict) else None
    if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < count:
        return index
    return None


def _score_of(item: dict) -> float:
    score = item.get("relevance_score")
    if isinstance(score, (int, float)) and not isinstance(score, bool) and math.isfinite(score):
        return float(score)
    return 0.0


def ranking_of(items: object, count: int, label: str) -> list[Ranked]:
    """A rerank API's results (``[{index, relevance_score}]``) as a ranking, best first. Repeated
    and out-of-range indices are dropped; :class:`RerankUnreadable` when none is left."""
    if not isinstance(items, list):
        raise malformed(label, "body (no list of results)")
    ranking: dict[int, Ranked] = {}
    for item in items:
        index = _index_of(item, count)
        if index is not None and index not in ranking:
            ranking[index] = Ranked(index, _score_of(item))
    if not ranking:
        raise RerankUnreadable(f"{label} named none of the {count} passages it was sent")
    # The APIs answer best first; sorting keeps it so for one that did not.
    return sorted(ranking.values(), key=lambda ranked: -ranked.relevance_score)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _as_object(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def rerank_timeout(backend: str) -> float:
    return settings.RERANK_TIMEOUT or DEFAULT_TIMEOUTS[backend]


def _timed_out(label: str, timeout: float) -> UpstreamTimeout:
    return UpstreamTimeout(f"{label} did not rerank within {timeout:g}s")


class Reranker(ABC):
    """One rerank connection with one backend."""

    backend: str
    label: str

    def __init__(self, *, timeout: float | None = None):
        self.timeout = timeout or rerank_timeout(self.backend)

    def cut(self, passages: Sequence[str]) -> list[str]:
        """The passages as the backend is sent them."""
        limit = PASSAGE_CHARS[self.backend]
        return [passage[:limit] for passage in passages]

    @abstractmethod
    def rerank(self, query: str, passages: Sequence[str], *, top_n: int) -> Reranked:
        """Ranks ``passages`` for ``query``; at most ``top_n`` of them are named."""

    @abstractmethod
    async def rerank_async(self, query: str, passages: Sequence[str], *, top_n: int) -> Reranked:
        """:meth:`rerank` from the event loop."""


class ApiReranker(Reranker):
    """A dedicated rerank API: one JSON request, one JSON reply of indices and scores."""

    path: str

    def __init__(self, *, base_url: str, api_key: str, model: str, timeout: float | None = None):
        super().__init__(timeout=timeout)
        self.url = f"{base_url}{self.path}"
        self.api_key = api_key
        self.model = model

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    @abstractmethod
    def payload(self, query: str, documents: list[str], top_n: int) -> dict[str, Any]:
        """The provider's request body."""

    @abstractmethod
    def read(self, reply: Mapping[str, Any], documents: list[str], query: str) -> Reranked:
        """The ranking and spend in the provider's reply."""

    def _reply(self, status: int, content: bytes, headers, documents: list[str], query: str) -> Reranked:
        reply = json_answer(
            label=self.label,
            secret=self.api_key,
            status=status,
            content=content,
            headers=headers,
            retryable_statuses=RETRYABLE_STATUSES,
        )
        if not isinstance(reply, dict):
            raise malformed(self.label, "body (not an object)")
        return self.read(reply, documents, query)

    def _estimated_input(self, query: str, documents: list[str]) -> int:
        return estimate_tokens([query, *documents])

    def rerank(self, query: str, passages: Sequence[str], *, top_n: int) -> Reranked:
        documents = self.cut(passages)
        response = http.request(
            "POST",
            self.url,
            headers=self._headers(),
            json_body=self.payload(query, documents, top_n),
            timeout=self.timeout,
        )
        return self._reply(response.status, response.content, response.headers, documents, query)

    async def rerank_async(self, query: str, passages: Sequence[str], *, top_n: int) -> Reranked:
        documents = self.cut(passages)
        async with http.open_stream(
            "POST",
            self.url,
            headers=self._headers(),
            json_body=self.payload(query, documents, top_n),
            timeout=self.timeout,
            first_byte_timeout=self.timeout,
        ) as upstream:
            content = await upstream.read()
        return self._reply(upstream.status, content, upstream.headers, documents, query)


class CohereReranker(ApiReranker):
    """Cohere's v2 rerank: ``{model, query, documents, top_n}`` →
    ``{results: [{index, relevance_score}], meta: {billed_units: {search_units}, tokens}}``."""

    backend = "cohere"
    label = "cohere_rerank"
    path = "/v2/rerank"

    def payload(self, query: str, documents: list[str], top_n: int) -> dict[str, Any]:
        return {"model": self.model, "query": query, "documents": documents, "top_n": top_n}

    def read(self, reply: Mapping[str, Any], documents: list[str], query: str) -> Reranked:
        spent = self._spent(reply, documents, query)
        return _ranked(spent, lambda: ranking_of(reply.get("results"), len(documents), self.label))

    def _spent(self, reply: Mapping[str, Any], documents: list[str], query: str) -> Reranked:
        meta = _as_object(reply.get("meta"))
        units = _count(_as_object(meta.get("billed_units")).get("search_units"))
        tokens = _as_object(meta.get("tokens"))
        input_tokens, output_tokens = _count(tokens.get("input_tokens")), _count(tokens.get("output_tokens"))
        reported = input_tokens is not None
        return Reranked(
            ranking=[],
            input_tokens=input_tokens if reported else self._estimated_input(query, documents),
            output_tokens=(output_tokens or 0) if reported else 0,
            tokens_reported=reported,
            search_units=DEFAULT_SEARCH_UNITS if units is None else units,
        )


class VoyageReranker(ApiReranker):
    """Voyage's v1 rerank: ``{model, query, documents, top_k, truncation}`` →
    ``{data: [{index, relevance_score}], usage: {total_tokens}}``."""

    backend = "voyage"
    label = "voyage_rerank"
    path = "/v1/rerank"

    def payload(self, query: str, documents: list[str], top_n: int) -> dict[str, Any]:
        return {"model": self.model, "query": query, "documents": documents, "top_k": top_n, "truncation": True}

    def read(self, reply: Mapping[str, Any], documents: list[str], query: str) -> Reranked:
        total = _count(_as_object(reply.get("usage")).get("total_tokens"))
        spent = Reranked(
            ranking=[],
            input_tokens=self._estimated_input(query, documents) if total is None else total,
            output_tokens=0,
            tokens_reported=total is not None,
        )
        return _ranked(spent, lambda: ranking_of(reply.get("data"), len(documents), self.label))


class ChatReranker(Reranker):
    """A chat model asked, in one listwise prompt at temperature 0, for the passage numbers in
    order of relevance; its answer is capped at RERANK_MAX_TOKENS. A passage the answer names at
    rank r (0-based) of n passages scores ``1 - r / n``."""

    backend = LLM_BACKEND

    def __init__(self, *, chat: ChatProvider, prompt: ListwisePrompt, timeout: float | None = None):
        super().__init__(timeout=timeout)
        self.chat = chat
        self.prompt = prompt
        self.label = chat.label

    def _body(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        return {"messages": messages, "temperature": 0, self.chat.token_limit_field: settings.RERANK_MAX_TOKENS}

    def _read(self, reply: Mapping[str, Any], messages: list[dict[str, Any]], count: int, top_n: int) -> Reranked:
        choices = reply.get("choices")
        message = _as_object(choices[0]).get("message") if isinstance(choices, list) and choices else None
        text = _as_object(message).get("content")
        usage = _as_object(reply.get("usage"))
        prompt_tokens, completion_tokens = _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
        reported = prompt_tokens is not None and completion_tokens is not None
        spent = Reranked(
            ranking=[],
            input_tokens=prompt_tokens if reported else estimate_tokens([m["content"] for m in messages]),
            output_tokens=completion_tokens if reported else math.ceil(len(text if isinstance(text, str) else "") / 4),
            tokens_reported=reported,
        )

        def rank() -> list[Ranked]:
            if not isinstance(text, str):
                raise RerankUnreadable(f"{self.label} answered the rerank prompt without text")
            order = passage_numbers(text, count)[:top_n]
            return [Ranked(index, 1 - rank / count) for rank, index in enumerate(order)]

        return _ranked(spent, rank)

    def rerank(self, query: str, passages: Sequence[str], *, top_n: int) -> Reranked:
        messages = self.prompt(query, self.cut(passages))
        try:
            reply = self.chat.complete_blocking(self._body(messages), timeout=self.timeout)
        except UpstreamTimeout:
            raise _timed_out(self.label, self.timeout) from None
        return self._read(reply, messages, len(passages), top_n)

    async def rerank_async(self, query: str, passages: Sequence[str], *, top_n: int) -> Reranked:
        messages = self.prompt(query, self.cut(passages))
        try:
            async with asyncio.timeout(self.timeout):
                reply = await self.chat.complete(self._body(messages))
        except (TimeoutError, UpstreamTimeout):
            raise _timed_out(self.label, self.timeout) from None
        return self._read(reply, messages, len(passages), top_n)


_API_RERANKERS: dict[str, type[ApiReranker]] = {"cohere": CohereReranker, "voyage": VoyageReranker}


def backend_of(connection: ModelConnection) -> str:
    """The backend ``connection`` reranks with when nothing else says (a rerank route's target):
    its rerank API's, else, for a chat connection, ``llm``."""
    return next(
        (backend for backend, provider in RERANK_API_PROVIDERS.items() if connection.provider_type == provider),
        LLM_BACKEND,
    )


def reranker(
    connection: ModelConnection,
    *,
    backend: str,
    model: str = "",
    prompt: ListwisePrompt | None = None,
    timeout: float | None = None,
) -> Reranker:
    """The reranker of ``connection`` with ``backend``, asking for ``model`` (a route's target may
    name another model than its connection's), else for the connection's own: a
    ``cohere_rerank`` / ``voyage_rerank`` connection for ``cohere`` / ``voyage``, a chat connection
    (and the listwise ``prompt``) for ``llm``. :class:`NoRerank` says why the connection cannot."""
    refusal_reason = why_cannot(connection, Capability.RERANK, rerank_backend=backend)
    if refusal_reason is not None:
        raise NoRerank(refusal_reason)
    try:
        if backend == LLM_BACKEND:
            if prompt is None:
                raise ValueError("the llm backend needs the listwise prompt")
            return ChatReranker(chat=chat_provider(connection, model=model), prompt=prompt, timeout=timeout)
        return _API_RERANKERS[backend](
            base_url=(connection.base_url or DEFAULT_BASE_URLS[RERANK_API_PROVIDERS[backend]]).rstrip("/"),
            api_key=open_api_key(connection),
            model=model or connection.model_name,
            timeout=timeout,
        )
    except (NoChat, DecryptionFailed) as exc:
        raise NoRerank(exc.message) from None
