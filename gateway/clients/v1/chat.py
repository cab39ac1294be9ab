"""POST /v1/chat/completions: the chat, grounded in the project's store, answered by its
connection or route, whole or relayed as a stream."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse

from gateway.clients import limiter, selectors
from gateway.clients.injection import inject, message_texts
from gateway.clients.ledger import Call, Spend
from gateway.clients.models import Endpoint, Scope
from gateway.clients.query_rewrite import with_condensation
from gateway.clients.serializers import ChatExtrasInput, ChatInput
from gateway.clients.v1.endpoint import client_left, end_call, json_body, routed, v1_endpoint, validated
from gateway.clients.v1.grounding import Grounding, ground
from gateway.clients.v1.spend import estimated_if_cancelled
from gateway.connections import failover
from gateway.connections.failover import Attempts, Plan
from gateway.connections.images import RemoteImages
from gateway.connections.providers.chat import NoChat
from gateway.connections.providers.chat_reply import count
from gateway.connections.providers.embeddings import estimate_tokens
from gateway.connections.providers.upstream_errors import failure_kind
from ragmux.core import metrics
from ragmux.core.crypto import DecryptionFailed
from ragmux.core.errors import (
    CLIENT_CLOSED,
    ServerFault,
    ServiceError,
    UpstreamFailed,
    openai_error_body,
    status_for,
)
from retrieval import context as rag_context
from retrieval.citations import citations

logger = logging.getLogger("ragmux.gateway.v1")


def _rag_headers(response: HttpResponse, call: Call, grounding: Grounding, sources: list[dict]) -> HttpResponse:
    if grounding.stores:
        response["x-ragmux-rag-hits"] = str(call.rag_hits)
    if sources:
        response["x-ragmux-rag-sources"] = rag_context.sources_header(sources)
    return response


def _count_usage(call: Call, usage: Any) -> bool:
    """Takes the upstream's token counts; False when it reported none."""
    if not isinstance(usage, dict):
        return False
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if not (isinstance(prompt, int) and isinstance(completion, int)) or prompt + completion <= 0:
        return False
    call.prompt_tokens, call.completion_tokens = prompt, completion
    details = usage.get("prompt_tokens_details")
    details = details if isinstance(details, dict) else {}
    call.cached_tokens = count(details.get("cached_tokens"))
    call.cache_write_tokens = count(details.get("cache_write_tokens"))
    return True


def _settle_tokens(call: Call, attempts: Attempts, sent: list[dict], answer_chars: int, reported: bool):
    """The chat's tokens, priced by the target that answered (or was tried last)."""
    target = attempts.current
    call.model = target.model
    if not reported:
        call.tokens_estimated = True
        call.prompt_tokens = estimate_tokens(message_texts(sent))
        call.completion_tokens = math.ceil(answer_chars / 4)
    call.spends.insert(
        0,
        Spend(
            target.connection.provider_type,
            target.model,
            call.prompt_tokens,
            call.completion_tokens,
            call.cached_tokens,
            call.cache_write_tokens,
        ),
    )


def _texts(choices: Any, key: str) -> dict[int, str]:
    """Each choice's text in a chat's answer (``key`` "message") or in one of its chunks ("delta"),
    by the choice's index."""
    texts: dict[int, str] = {}
    for position, choice in enumerate(choices if isinstance(choices, list) else []):
        part = choice.get(key) if isinstance(choice, dict) else None
        content = part.get("content") if isinstance(part, dict) else None
        if isinstance(content, str):
            index = choice.get("index") if type(choice.get("index")) is int else position
            texts[index] = texts.get(index, "") + content
    return texts


def _answer_chars(choices: Any, key: str) -> int:
    return sum(len(text) for text in _texts(choices, key).values())


def _first_text(choices: Any, key: str) -> str:
    """The text of the first choice, the one citations are read from."""
    return _texts(choices, key).get(0, "")


def _closes(chunk: dict) -> bool:
    """Whether ``chunk`` is one a grounded stream holds back to send last with its citations: a
    choice's last (its `finish_reason` set), or the usage chunk the client asked for."""
    choices = chunk.get("choices")
    if not choices:
        return bool(chunk.get("usage"))
    return any(isinstance(choice, dict) and choice.get("finish_reason") for choice in choices)


def _citations_frame(last: dict, held: dict | None, model: str, sources: list[dict], answer: str) -> bytes:
    """A grounded stream's last chunk before `[DONE]`, with the citations of what the first
    choice wrote: the chunk held back (:func:`_closes`), so a client that asked for no usage
    still gets no chunk without choices, and one that did still gets it last; else (an upstream
    that never said it finished) a chunk of no choices, with the id and time of its ``last``."""
    chunk = held or {
        "id": last.get("id"),
        "object": "chat.completion.chunk",
        "created": last.get("created"),
        "model": model,
        "choices": [],
    }
    chunk["ragmux"] = {"citations": citations(answer, sources)}
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


def _chat_size(call: Call, plan: Plan, body: dict, messages: list[dict], grounding: Grounding) -> dict[str, Any]:
    """A chat's size before it is made, as the limits reserve it: the system prompt and the
    client's messages (reference §4.7's estimate, before any context) and the completion it may
    write (`max_tokens`, else LIMIT_DEFAULT_COMPLETION_TOKENS); priced with its query's embedding
    in each store it is grounded in, and, as any of a route's targets may answer, at the dearest
    target's price."""
    written = next(
        (body[name] for name in ("max_tokens", "max_completion_tokens") if type(body.get(name)) is int), None
    )
    completion = settings.LIMIT_DEFAULT_COMPLETION_TOKENS if written is None else max(written, 0)
    prompt = estimate_tokens([call.project.system_prompt, *message_texts(messages)])
    chat = [Spend(target.connection.provider_type, target.model, prompt, completion) for target in plan.targets]
    size = {"tokens": prompt + completion, "spends": grounding.query_spends(messages), "dearest_of": chat}
    return with_condensation(size, call.project, messages, searches=bool(grounding.stores))


def _retrieval_size(call: Call, plan: Plan, context: str) -> dict[str, Any]:
    """What retrieval adds to a chat's reservation before the upstream is asked: the context it
    puts in the prompt, priced at the dearest target's input price, and what its rerank spent."""
    context_tokens = estimate_tokens([context]) if context else 0
    return {
        "tokens": context_tokens + call.rerank_tokens,
        "spends": [spend for spend in call.spends if spend.rerank],
        "dearest_of": [Spend(target.connection.provider_type, target.model, context_tokens) for target in plan.targets],
    }


async def _chat_plan(call: Call, model: str) -> Plan:
    """The route the call's `model` names among the project's allowed routes, else the
    project's chat route, else its chat connection."""
    found = await selectors.chat_route(project=call.project, model=model)
    if found is None:
        return Plan.of_connection(call.project.chat_connection)
    return Plan.of_route(*found)


@v1_endpoint(endpoint=Endpoint.CHAT, scope=Scope.CHAT, methods=("POST",))
async def chat_completions(request: HttpRequest, call: Call) -> HttpResponse:
    return await complete_chat(call, json_body(request))


async def complete_chat(call: Call, body: dict, grounding: Grounding | None = None) -> HttpResponse:
    """The chat ``body`` asks for, answered whole or as a stream of chunks (shared with
    `/v1/responses`, which speaks to its clients in another shape), grounded in the project's
    store unless ``grounding`` names other stores (a response's `file_search`)."""
    data = validated(ChatInput, body)
    extras = body.pop("ragmux", None)  # ours: never sent upstream
    include_context = isinstance(extras, dict) and extras.get("include_context") is True
    filters = validated(ChatExtrasInput, extras if isinstance(extras, dict) else {})["filters"]
    grounding = grounding or Grounding.of_project(call, filters)
    plan = await _chat_plan(call, data["model"])
    attempts = Attempts(plan.targets[0])
    call.model = attempts.current.model
    client_model = data["model"] or attempts.current.model

    await limiter.admit(call, **_chat_size(call, plan, body, data["messages"], grounding))
    context, sources = await ground(call, grounding, data["messages"], plan)
    await limiter.top_up(call, **_retrieval_size(call, plan, context))
    body["messages"] = inject(data["messages"], context=context, system_prompt=call.project.system_prompt)

    # Fetch slots are shared fairly between projects.
    images = RemoteImages(owner=f"project:{call.project.pk}")
    unanswered = functools.partial(_settle_tokens, call, attempts, body["messages"], answer_chars=0, reported=False)
    with estimated_if_cancelled(unanswered):
        if data["stream"]:
            call.streamed = True
            response = await _stream(call, plan, attempts, body, images, client_model, sources)
            return _rag_headers(response, call, grounding, sources)
        reply = await _answer(
            call,
            plan,
            attempts,
            _measured(
                attempts,
                metrics.UPSTREAM_SECONDS,
                lambda provider, once: provider.complete(body, once=once, images=images),
            ),
        )
    reported = _count_usage(call, reply.get("usage"))
    _settle_tokens(call, attempts, body["messages"], _answer_chars(reply.get("choices"), "message"), reported)
    reply["model"] = client_model
    ours = {"sources": sources, "context": context} if include_context else {}
    if sources:
        ours["citations"] = citations(_first_text(reply.get("choices"), "message"), sources)
    if ours:
        reply["ragmux"] = ours
    return _rag_headers(JsonResponse(reply), call, grounding, sources)


async def _answer(call: Call, plan: Plan, attempts: Attempts, attempt):
    """:func:`routed`, with a project's chat connection that cannot chat said as such."""
    try:
        return await routed(call, plan, attempts, attempt)
    except (NoChat, DecryptionFailed) as exc:
        logger.error("project %s: chat connection unusable: %s", call.project.pk, exc)
        raise ServerFault("model connection unavailable", code="connection_unavailable") from None


def _count_failure(attempts: Attempts, exc: UpstreamFailed) -> None:
    provider = attempts.current.connection.provider_type
    metrics.increment(metrics.UPSTREAM_ERRORS, provider=provider, type=failure_kind(exc))


def _measured(attempts: Attempts, histogram, attempt):
    """``attempt`` (one call to the target ``attempts.current`` names), its seconds observed in
    ``histogram`` when it answers and its failure counted when it fails, by provider type."""

    async def measured(provider, once):
        started = time.monotonic()
        try:
            result = await attempt(provider, once)
        except UpstreamFailed as exc:
            _count_failure(attempts, exc)
            raise
        metrics.observe(histogram, time.monotonic() - started, provider=attempts.current.connection.provider_type)
        return result

    return measured


async def _stream(
    call: Call,
    plan: Plan,
    attempts: Attempts,
    body: dict,
    images: RemoteImages,
    client_model: str,
    sources: list[dict],
) -> HttpResponse:
    wants_usage = isinstance(body.get("stream_options"), dict) and body["stream_options"].get("include_usage") is True
    stack = AsyncExitStack()
    upstream_started = 0.0

    async def opened(provider, once):
        nonlocal upstream_started
        upstream_started = time.monotonic()
        return await stack.enter_async_context(provider.stream(body, once=once, images=images))

    # Opening reads the first chunk: an upstream that fails before it gets a plain JSON error,
    # and a route's next target is tried; after it, nothing moves the call to another target.
    # So the opening's seconds are the target's time to first token.
    chunks = await _answer(call, plan, attempts, _measured(attempts, metrics.FIRST_TOKEN_SECONDS, opened))

    async def relay() -> AsyncIterator[bytes]:
        status, error, reported, answer_chars, relayed, first_text, held = 200, "", False, 0, 0, [], None
        metrics.move(metrics.STREAMS_ACTIVE, 1)
        try:
            async with stack:
                async for chunk in chunks:
                    reported = _count_usage(call, chunk.get("usage")) or reported
                    answer_chars += _answer_chars(chunk.get("choices"), "delta")
                    first_text.append(_first_text(chunk.get("choices"), "delta"))
                    if not wants_usage and "usage" in chunk:
                        # The usage was asked for by us, not by the client: keep it to ourselves.
                        del chunk["usage"]
                        if not chunk.get("choices"):
                            continue
                    chunk["model"] = client_model
                    if sources and _closes(chunk):
                        # The last such chunk goes out last, with the citations.
                        chunk, held = held, chunk
                        if chunk is None:
                            continue
                    call.mark_first_byte()
                    relayed += 1
                    yield b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"
            if sources:
                yield _citations_frame(chunk, held, client_model, sources, "".join(first_text))
        except ServiceError as exc:
            if isinstance(exc, UpstreamFailed):
                _count_failure(attempts, exc)
            if isinstance(exc, UpstreamFailed) and exc.code not in failover.STREAM_BOUNDS:
                # Said with how far the answer got, so no one looks for a wrong base URL.
                exc.message = f"{exc.message} (after {relayed} chunks)"
                if exc.client_message:
                    exc.client_message = f"{exc.client_message} (after {relayed} chunks)"
                await failover.failed_mid_stream(attempts, exc)
            status, error = status_for(exc), exc.message
            frame = openai_error_body(exc)
            yield b"data: " + json.dumps(frame).encode() + b"\n\n"
        except (asyncio.CancelledError, GeneratorExit):
            # The client went away; leaving `async with stack` has closed the upstream call.
            status = CLIENT_CLOSED
            raise
        finally:
            metrics.move(metrics.STREAMS_ACTIVE, -1)
            provider = attempts.current.connection.provider_type
            metrics.observe(metrics.UPSTREAM_SECONDS, time.monotonic() - upstream_started, provider=provider)
            _settle_tokens(call, attempts, body["messages"], answer_chars, reported)
            if status == CLIENT_CLOSED:
                client_left(call)
        await end_call(call, status, error)
        yield b"data: [DONE]\n\n"

    call.relaying = True
    response = StreamingHttpResponse(relay(), content_type="text/event-stream")
    response["X-Accel-Buffering"] = "no"
    return response
