"""The OpenAI-compatible client API under `/v1`: async views, so a stream holds no thread.

Each view is one operation. :func:`v1_endpoint` does what they share: CORS, the method,
the key and its scope, the error envelope, and the request log row of every call made
with a valid key.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from typing import Any

import numpy as np
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from gateway.clients import access, limiter, limits, routed_chat, selectors
from gateway.clients.injection import inject, message_texts, query_text
from gateway.clients.ledger import Call, Spend
from gateway.clients.models import Endpoint, RerankOutcome, Scope
from gateway.clients.offloop import off_loop
from gateway.clients.routed_chat import Attempts, ChatPlan, ChatTarget
from gateway.clients.serializers import ChatExtrasInput, ChatInput, EmbeddingsInput, RerankInput, RetrieveInput
from gateway.connections.images import RemoteImages
from gateway.connections.models import ModelConnection
from gateway.connections.providers.chat import NoChat
from gateway.connections.providers.chat_reply import count
from gateway.connections.providers.embeddings import Embeddings, embedding_provider, estimate_tokens
from gateway.connections.providers.rerank import (
    LLM_BACKEND,
    PASSAGE_CHARS,
    Reranked,
    Reranker,
    RerankUnreadable,
    backend_of,
    reranker,
)
from gateway.connections.providers.upstream_errors import failure_kind
from ragmux.core import logs, metrics
from ragmux.core.bodies import body_limit, parse_json
from ragmux.core.crypto import DecryptionFailed
from ragmux.core.errors import (
    CLIENT_CLOSED,
    InvalidInput,
    MethodNotAllowed,
    NotFound,
    ServerFault,
    ServiceError,
    UpstreamFailed,
    body_too_large,
    database_unavailable,
    openai_error_body,
    openai_error_response,
    status_for,
    validation_failed,
)
from retrieval import context as rag_context
from retrieval.filters import Filter
from retrieval.rerank import RerankReport, project_rerank_connection, rerank_async
from retrieval.rerank_prompt import listwise_prompt
from retrieval.search import SearchOptions, SearchResult, embed_query_async, store_search
from retrieval.serializers import HitOutput, rerank_fields
from stores.models import RagStore

logger = logging.getLogger("ragmux.gateway.v1")
View = Callable[..., Awaitable[HttpResponse]]
CORS_MAX_AGE = "600"
# What a browser's script may read of a /v1 answer.
EXPOSED_HEADERS = ", ".join(
    ("x-ragmux-rag-hits", "x-ragmux-rag-sources", "x-request-id", "retry-after", *limits.HEADER_NAMES)
)
CLIENT_CLOSED_REASON = "client closed request"


# --------------------------------------------------------------------------------------------
# What every endpoint shares
# --------------------------------------------------------------------------------------------


def _cors_origin(request: HttpRequest) -> str | None:
    origin = request.headers.get("Origin")
    allowed = settings.V1_CORS_ORIGINS
    if origin and ("*" in allowed or origin in allowed):
        return origin
    return None


def _with_cors(response: HttpResponse, origin: str | None) -> HttpResponse:
    if origin is not None:
        response["Access-Control-Allow-Origin"] = origin
        response["Access-Control-Expose-Headers"] = EXPOSED_HEADERS
        response["Vary"] = "Origin"
    return response


def _preflight(origin: str | None, methods: tuple[str, ...]) -> HttpResponse:
    response = HttpResponse(status=204)
    if origin is not None:
        response["Access-Control-Allow-Methods"] = ", ".join((*methods, "OPTIONS"))
        response["Access-Control-Allow-Headers"] = "authorization, content-type, x-stainless-*, openai-*"
        response["Access-Control-Max-Age"] = CORS_MAX_AGE
    return _with_cors(response, origin)


def json_body(request: HttpRequest) -> dict[str, Any]:
    """The request's body, a JSON object within the path's size limit; a body labelled as
    anything but JSON is refused unread (a body without a Content-Type is read as JSON)."""
    media_type = request.content_type or ""
    if request.headers.get("Content-Type") and media_type != "application/json" and not media_type.endswith("+json"):
        raise InvalidInput(
            f"the request body must be JSON (Content-Type: application/json), not {media_type[:100]!r}",
            code="unsupported_media_type",
        )
    limit = body_limit(request.path)
    try:
        declared = int(request.headers.get("Content-Length") or 0)
    except ValueError:
        declared = 0
    if declared > limit or len(request.body) > limit:
        raise body_too_large(limit)
    body = parse_json(request.body or b"null")
    if not isinstance(body, dict):
        raise InvalidInput("the request body must be a JSON object", code="invalid_json")
    return body


def _validated(serializer_class, body: dict[str, Any]) -> dict[str, Any]:
    data = serializer_class(data=body)
    if not data.is_valid():
        raise validation_failed(data.errors, code="invalid_request")
    return data.validated_data


def v1_endpoint(*, endpoint: str, scope: str, methods: tuple[str, ...]) -> Callable[[View], View]:
    def decorate(handler: View) -> View:
        @csrf_exempt
        @functools.wraps(handler)
        async def view(request: HttpRequest, **kwargs) -> HttpResponse:
            origin = _cors_origin(request)
            if request.method == "OPTIONS":
                return _preflight(origin, methods)
            if request.method not in methods:
                response = openai_error_response(MethodNotAllowed(f"{request.method} is not allowed here"))
                response["Allow"] = ", ".join(methods)
                return _with_cors(response, origin)
            return _with_cors(await _serve(request, handler, endpoint, scope, kwargs), origin)

        return view

    return decorate


async def _serve(request: HttpRequest, handler: View, endpoint: str, scope: str, kwargs: dict) -> HttpResponse:
    try:
        api_key = await access.authenticate(authorization=request.headers.get("Authorization", ""), endpoint=endpoint)
    except ServiceError as exc:
        return openai_error_response(exc)
    except Exception as exc:
        if (unavailable := database_unavailable(exc)) is None:
            raise
        logger.warning("/v1/%s: the key could not be read: %s", endpoint, exc)
        return openai_error_response(unavailable)
    logs.note(project_id=api_key.project_id, api_key_id=api_key.pk)
    call = Call(project=api_key.project, key=api_key, endpoint=endpoint)
    try:
        access.require_scope(api_key, scope)
        response = await handler(request, call, **kwargs)
    except asyncio.CancelledError:
        # The client went away and Django cancelled the view: the upstream call it awaited was
        # closed on the way out (every outbound call is an `async with`), and the call is still
        # recorded. finish() only queues the record, so the cancellation is not held up.
        _client_left(call)
        raise
    except ServiceError as exc:
        response = openai_error_response(exc)
        _end(call, response.status_code, exc.message)
    except Exception as exc:
        if (unavailable := database_unavailable(exc)) is not None:
            logger.warning("/v1/%s: %s", endpoint, exc)
            response = openai_error_response(unavailable)
            _end(call, response.status_code, unavailable.message)
        else:
            request_id = getattr(request, "request_id", "-")
            logger.exception("internal error in /v1/%s (request id %s)", endpoint, request_id)
            _end(call, 500, "internal error")
            response = openai_error_response(ServerFault(f"internal error (request id {request_id})"))
    else:
        if not call.relaying:
            call.mark_first_byte()
            _end(call, response.status_code)
    for name, value in call.limit_headers.items():
        response[name] = value
    return response


# The tasks settling ended calls, held so the loop does not drop them before they finish.
_settling: set[asyncio.Task] = set()


def _end(call: Call, status: int, error: str = "") -> None:
    """A call whose answer has ended: its reservation released, then its row queued, in a task of
    their own: the answer goes out without waiting for the release statement, which is sent as
    the answer is written, before the client can read it and call again."""
    task = asyncio.get_running_loop().create_task(_release_and_finish(call, status, error))
    _settling.add(task)
    task.add_done_callback(_settling.discard)


async def _release_and_finish(call: Call, status: int, error: str) -> None:
    try:
        await limiter.release(call)
    finally:
        call.finish(status, error)


def _client_left(call: Call) -> None:
    call.finish(CLIENT_CLOSED, CLIENT_CLOSED_REASON)
    metrics.increment(metrics.CLIENT_DISCONNECTS, endpoint=call.endpoint)


# --------------------------------------------------------------------------------------------
# POST /v1/chat/completions
# --------------------------------------------------------------------------------------------


@contextmanager
def _estimated_if_cancelled(estimate: Callable[[], None]) -> Iterator[None]:
    """Around work that spends tokens the client may walk away from: the upstream is not asked for
    its count then, so ``estimate`` records the spend."""
    try:
        yield
    except asyncio.CancelledError:
        estimate()
        raise


def _count_embedding(call: Call, connection: ModelConnection, tokens: int, *, reported: bool) -> None:
    call.embedding_tokens, call.tokens_estimated = tokens, not reported
    call.spends.append(Spend(connection.provider_type, connection.model_name, tokens))


async def _search(call: Call, store: RagStore, query: str, overrides: dict[str, Any] | None = None) -> SearchResult:
    """:func:`store_search` with the query embedded here, on the event loop, so a client that leaves
    ends that upstream call too; its tokens are counted even then (estimated when unanswered).
    Every search of a call comes here: the key's document scope is ANDed in here."""
    overrides = {**(overrides or {}), "filters": access.scoped_filters(call.key, (overrides or {}).get("filters"))}
    embeds = SearchOptions.for_store(store, overrides).embeds_query(store)
    embedded: Embeddings | None = None

    def spent_so_far() -> None:
        if embedded is not None:
            _count_embedding(call, store.embedding_connection, embedded.tokens, reported=embedded.tokens_reported)
        elif embeds:
            _count_embedding(call, store.embedding_connection, estimate_tokens([query]), reported=False)

    with _estimated_if_cancelled(spent_so_far):
        started = time.monotonic()
        if embeds:
            embedded = await embed_query_async(store, query)
        vector = None if embedded is None else embedded.vectors[0]
        result = await off_loop(
            store_search,
            store=store,
            query=query,
            overrides=overrides,
            query_vector=vector,
            query_embedding_ms=(time.monotonic() - started) * 1000,
        )
    if embedded is not None:
        result.embedding_tokens, result.embedding_tokens_reported = embedded.tokens, embedded.tokens_reported
    return result


async def _rerank_and_record(call: Call, store: RagStore, query: str, result: SearchResult) -> None:
    """The store's rerank of ``result``, when it has reranking on (`llm` asks the project's own chat
    model), then what the search and its rerank spent onto the call. Outside the search's
    SEARCH_TIMEOUT, as a rerank has timeouts of its own; a failure keeps the fused order
    (retrieval.rerank). A client that leaves during the rerank is charged the query's embedding
    and the rerank's estimate."""
    if not result.options.rerank:
        _record_search(call, store, result)
        return
    chat_connection = call.project.chat_connection
    if chat_connection is None:
        # A project that chats through a route reranks (`llm`) with the route's first target.
        routed = await selectors.chat_route(project=call.project, model="")
        chat_connection = None if routed is None else routed[1][0].connection
    # The store's rerank connection or route targets, which the key's statement does not load.
    choice = await off_loop(project_rerank_connection, store, result, chat_connection=chat_connection)

    def unanswered() -> None:
        _record_search(call, store, result)
        if choice.connection is not None:
            pool = [hit.content for hit in result.hits[: result.options.rerank_candidates]]
            estimate = _rerank_estimate(result.options.rerank_backend, query, pool)
            _count_rerank(call, choice.connection, choice.connection.model_name, estimate)

    with _estimated_if_cancelled(unanswered):
        await rerank_async(result, query=query, choice=choice)
    _record_search(call, store, result)


def _count_rerank(call: Call, connection: ModelConnection, model: str, reranked: Reranked) -> None:
    """A rerank's tokens onto the call's row, priced by the connection (and model) that ran it."""
    call.rerank_tokens += reranked.tokens
    call.tokens_estimated = call.tokens_estimated or not reranked.tokens_reported
    call.spends.append(Spend.of_rerank(connection.provider_type, model, reranked))


def _rerank_outcome(report: RerankReport) -> tuple[str, str]:
    """A rerank's outcome on the request log row, and why when it did not rerank."""
    if report.reranked:
        return RerankOutcome.RERANKED, ""
    if report.skipped:
        return RerankOutcome.SKIPPED, report.skipped_reason
    return RerankOutcome.FALLBACK, report.fallback_reason


def _record_search(call: Call, store: RagStore, result: SearchResult) -> None:
    """What a call's search found, what embedding its query cost and what its rerank spent."""
    call.rag_hits = len(result.hits)
    call.sources = rag_context.sources(result.hits)
    call.embedding_tokens = result.embedding_tokens
    call.tokens_estimated = not result.embedding_tokens_reported
    if result.embedding_tokens:
        embedder = store.embedding_connection
        call.spends.append(Spend(embedder.provider_type, embedder.model_name, result.embedding_tokens))
    report = result.rerank
    if report is None:
        return
    call.rerank_outcome, call.rerank_reason = _rerank_outcome(report)
    for connection, billed in report.billed:
        _count_rerank(call, connection, connection.model_name, billed)
    if report.spent is not None:
        _count_rerank(call, report.connection, report.connection.model_name, report.spent)


async def _ground(call: Call, messages: list[dict], filters: Filter | None = None) -> tuple[str, list[dict]]:
    """The context block and its sources; retrieval trouble leaves the chat ungrounded, with the
    reason in the call's log row."""
    store = call.project.store
    query = query_text(messages)
    if store is None or not query:
        return "", []
    try:
        result = await asyncio.wait_for(
            _search(call, store, query, {"filters": filters}), timeout=settings.SEARCH_TIMEOUT
        )
    except TimeoutError:
        call.rag_skipped_reason = f"retrieval took longer than SEARCH_TIMEOUT ({settings.SEARCH_TIMEOUT:g}s)"
    except ServiceError as exc:
        call.rag_skipped_reason = exc.message
    except Exception:
        logger.exception("retrieval for project %s failed", call.project.pk)
        call.rag_skipped_reason = "internal error in retrieval (see the server log)"
    else:
        await _rerank_and_record(call, store, query, result)
        return rag_context.render_context(result.hits), call.sources
    logger.warning("project %s answers without context: %s", call.project.pk, call.rag_skipped_reason)
    return "", []


def _rag_headers(response: HttpResponse, call: Call, sources: list[dict]) -> HttpResponse:
    if call.project.store_id is not None:
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


def _answer_chars(choices: Any, key: str) -> int:
    total = 0
    for choice in choices if isinstance(choices, list) else []:
        part = choice.get(key) if isinstance(choice, dict) else None
        content = part.get("content") if isinstance(part, dict) else None
        total += len(content) if isinstance(content, str) else 0
    return total


def _query_spend(store: RagStore, query: str) -> Spend:
    embedder = store.embedding_connection
    return Spend(embedder.provider_type, embedder.model_name, estimate_tokens([query]))


def _chat_size(call: Call, plan: ChatPlan, body: dict, messages: list[dict]) -> dict[str, Any]:
    """A chat's size before it is made, as the limits reserve it: the system prompt and the
    client's messages (reference §4.7's estimate, before any context) and the completion it may
    write (`max_tokens`, else LIMIT_DEFAULT_COMPLETION_TOKENS); priced with its query's embedding,
    and, as any of a route's targets may answer, at the dearest target's price."""
    written = next(
        (body[name] for name in ("max_tokens", "max_completion_tokens") if type(body.get(name)) is int), None
    )
    completion = settings.LIMIT_DEFAULT_COMPLETION_TOKENS if written is None else max(written, 0)
    prompt = estimate_tokens([call.project.system_prompt, *message_texts(messages)])
    chat = [Spend(target.connection.provider_type, target.model, prompt, completion) for target in plan.targets]
    query = query_text(messages)
    spends = [_query_spend(call.project.store, query)] if call.project.store is not None and query else []
    return {"tokens": prompt + completion, "spends": spends, "dearest_of": chat}


def _retrieval_size(call: Call, plan: ChatPlan, context: str) -> dict[str, Any]:
    """What retrieval adds to a chat's reservation before the upstream is asked: the context it
    puts in the prompt, priced at the dearest target's input price, and what its rerank spent."""
    context_tokens = estimate_tokens([context]) if context else 0
    return {
        "tokens": context_tokens + call.rerank_tokens,
        "spends": [spend for spend in call.spends if spend.rerank],
        "dearest_of": [Spend(target.connection.provider_type, target.model, context_tokens) for target in plan.targets],
    }


async def _chat_plan(call: Call, model: str) -> ChatPlan:
    """The route the call's `model` names among the project's allowed routes, else the
    project's chat route, else its chat connection."""
    found = await selectors.chat_route(project=call.project, model=model)
    if found is None:
        return ChatPlan.of_connection(call.project.chat_connection)
    route, targets = found
    return ChatPlan(
        [
            ChatTarget(
                target.connection,
                target.effective_model_name,
                target.weight,
                target.first_byte_timeout,
            )
            for target in targets
        ],
        route=route.name,
        strategy=route.strategy,
    )


@v1_endpoint(endpoint=Endpoint.CHAT, scope=Scope.CHAT, methods=("POST",))
async def chat_completions(request: HttpRequest, call: Call) -> HttpResponse:
    body = json_body(request)
    data = _validated(ChatInput, body)
    extras = body.pop("ragmux", None)  # ours: never sent upstream
    include_context = isinstance(extras, dict) and extras.get("include_context") is True
    filters = _validated(ChatExtrasInput, extras if isinstance(extras, dict) else {})["filters"]
    plan = await _chat_plan(call, data["model"])
    attempts = Attempts(plan.targets[0])
    call.model = attempts.current.model
    client_model = data["model"] or attempts.current.model

    await limiter.admit(call, **_chat_size(call, plan, body, data["messages"]))
    context, sources = await _ground(call, data["messages"], filters)
    await limiter.top_up(call, **_retrieval_size(call, plan, context))
    body["messages"] = inject(data["messages"], context=context, system_prompt=call.project.system_prompt)

    # Fetch slots are shared fairly between projects.
    images = RemoteImages(owner=f"project:{call.project.pk}")
    unanswered = functools.partial(_settle_tokens, call, attempts, body["messages"], answer_chars=0, reported=False)
    with _estimated_if_cancelled(unanswered):
        if data["stream"]:
            call.streamed = True
            return await _stream(call, plan, attempts, body, images, client_model, sources)
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
    if include_context:
        reply["ragmux"] = {"sources": sources, "context": context}
    return _rag_headers(JsonResponse(reply), call, sources)


async def _answer(call: Call, plan: ChatPlan, attempts: Attempts, attempt):
    """:func:`routed_chat.answer`, with a project's chat connection that cannot chat said as such."""
    try:
        return await routed_chat.answer(call, plan, attempts, attempt)
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
    plan: ChatPlan,
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
        status, error, reported, answer_chars, relayed = 200, "", False, 0, 0
        metrics.move(metrics.STREAMS_ACTIVE, 1)
        try:
            async with stack:
                async for chunk in chunks:
                    reported = _count_usage(call, chunk.get("usage")) or reported
                    answer_chars += _answer_chars(chunk.get("choices"), "delta")
                    if not wants_usage and "usage" in chunk:
                        # The usage was asked for by us, not by the client: keep it to ourselves.
                        del chunk["usage"]
                        if not chunk.get("choices"):
                            continue
                    chunk["model"] = client_model
                    call.mark_first_byte()
                    relayed += 1
                    yield b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"
        except ServiceError as exc:
            if isinstance(exc, UpstreamFailed):
                _count_failure(attempts, exc)
            if isinstance(exc, UpstreamFailed) and exc.code not in routed_chat.STREAM_BOUNDS:
                # Said with how far the answer got, so no one looks for a wrong base URL.
                exc.message = f"{exc.message} (after {relayed} chunks)"
                if exc.client_message:
                    exc.client_message = f"{exc.client_message} (after {relayed} chunks)"
                await routed_chat.failed_mid_stream(attempts, exc)
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
                _client_left(call)
        _end(call, status, error)
        yield b"data: [DONE]\n\n"

    call.relaying = True
    response = StreamingHttpResponse(relay(), content_type="text/event-stream")
    response["X-Accel-Buffering"] = "no"
    return _rag_headers(response, call, sources)


# --------------------------------------------------------------------------------------------
# POST /v1/retrieve, POST /v1/embeddings
# --------------------------------------------------------------------------------------------


@v1_endpoint(endpoint=Endpoint.RETRIEVE, scope=Scope.RETRIEVE, methods=("POST",))
async def retrieve(request: HttpRequest, call: Call) -> HttpResponse:
    data = _validated(RetrieveInput, json_body(request))
    store = call.project.store
    if store is None:
        raise InvalidInput("this project has no RAG store to retrieve from", code="no_store")
    call.model = store.embedding_connection.model_name
    query_spend = _query_spend(store, data["query"])
    await limiter.admit(call, tokens=query_spend.prompt_tokens, spends=[query_spend])
    result = await _search(call, store, data["query"], {"top_k": data["top_k"], "filters": data["filters"]})
    await _rerank_and_record(call, store, data["query"], result)
    return JsonResponse(
        {
            "object": "list",
            "data": HitOutput(result.hits, many=True).data,
            "mode": result.mode,
            "backend": result.backend,
            "fts_config": result.fts_config,
            **rerank_fields(result),
            "usage": {
                "prompt_tokens": result.embedding_tokens,
                "rerank_tokens": call.rerank_tokens,
                "total_tokens": result.embedding_tokens + call.rerank_tokens,
            },
        }
    )


async def _embed_all(connection: ModelConnection, texts: list[str]) -> tuple[list[list[float]], int, bool]:
    provider = embedding_provider(connection)
    vectors: list[list[float]] = []
    tokens, reported = 0, True
    for start in range(0, len(texts), provider.max_batch):
        embedded = await provider.embed_async(texts[start : start + provider.max_batch])
        vectors.extend(embedded.vectors)
        tokens += embedded.tokens
        reported = reported and embedded.tokens_reported
    return vectors, tokens, reported


def _encoded(vector: list[float], encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return vector


@v1_endpoint(endpoint=Endpoint.EMBEDDINGS, scope=Scope.CHAT, methods=("POST",))
async def embeddings(request: HttpRequest, call: Call) -> HttpResponse:
    data = _validated(EmbeddingsInput, json_body(request))
    connection = call.project.embedding_connection
    if connection is None:
        raise InvalidInput("this project has no embedding connection", code="no_embedding_connection")
    call.model = connection.model_name
    estimated = estimate_tokens(data["input"])
    spend = Spend(connection.provider_type, connection.model_name, estimated)
    await limiter.admit(call, tokens=estimated, spends=[spend])
    estimate = functools.partial(_count_embedding, call, connection, estimated, reported=False)
    with _estimated_if_cancelled(estimate):
        vectors, tokens, reported = await _embed_all(connection, data["input"])
    _count_embedding(call, connection, tokens, reported=reported)
    return JsonResponse(
        {
            "object": "list",
            "data": [
                {"object": "embedding", "index": index, "embedding": _encoded(vector, data["encoding_format"])}
                for index, vector in enumerate(vectors)
            ],
            "model": data["model"] or connection.model_name,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )


# --------------------------------------------------------------------------------------------
# POST /v1/rerank
# --------------------------------------------------------------------------------------------


async def _rerank_plan(call: Call, model: str) -> tuple[ChatPlan, dict[ChatTarget, str]]:
    """Who reranks for a `model`: the rerank route of that name the project allows (or its store
    reranks through), else the rerank connection of the project's store when ``model`` is its
    name or its model's; with the backend each target reranks with. Anything else is no model of this project."""
    found = await selectors.rerank_route(project=call.project, model=model)
    if found is not None:
        route, targets = found
        plan = ChatPlan(
            [
                ChatTarget(target.connection, target.effective_model_name, target.weight, target.first_byte_timeout)
                for target in targets
            ],
            route=route.name,
            strategy=route.strategy,
        )
        return plan, {target: backend_of(target.connection) for target in plan.targets}
    store = call.project.store
    connection = None if store is None else await selectors.store_rerank_connection(store=store)
    if connection is None or model not in (connection.name, connection.model_name):
        raise NotFound(f"no rerank model {model!r} for this project", code="model_not_found")
    plan = ChatPlan.of_connection(connection)
    return plan, {plan.targets[0]: store.rerank_backend}


def _rerank_estimate(backend: str, query: str, documents: list[str]) -> Reranked:
    """What a rerank with ``backend`` is expected to spend: its passages as the backend cuts them
    (characters / 4) and, for a chat model, the longest answer it may write."""
    cut = PASSAGE_CHARS[backend]
    return Reranked(
        ranking=[],
        input_tokens=estimate_tokens([query, *(document[:cut] for document in documents)]),
        output_tokens=settings.RERANK_MAX_TOKENS if backend == LLM_BACKEND else 0,
        tokens_reported=False,
    )


@v1_endpoint(endpoint=Endpoint.RERANK, scope=Scope.RERANK, methods=("POST",))
async def rerank(request: HttpRequest, call: Call) -> HttpResponse:
    data = _validated(RerankInput, json_body(request))
    query, documents, top_n = data["query"], data["documents"], data["top_n"]
    plan, backends = await _rerank_plan(call, data["model"])
    attempts = Attempts(plan.targets[0])
    call.model = attempts.current.model
    estimates = {target: _rerank_estimate(backend, query, documents) for target, backend in backends.items()}
    await limiter.admit(
        call,
        tokens=max(estimate.tokens for estimate in estimates.values()),
        spends=[],
        dearest_of=[
            Spend.of_rerank(target.connection.provider_type, target.model, estimate)
            for target, estimate in estimates.items()
        ],
    )

    def open_target(target: ChatTarget) -> Reranker:
        return reranker(
            target.connection,
            backend=backends[target],
            model=target.model,
            prompt=listwise_prompt,
            timeout=target.first_byte_timeout,
        )

    def unanswered() -> None:
        target = attempts.current
        _count_rerank(call, target.connection, target.model, estimates[target])

    async def ranked(ranker: Reranker, once) -> Reranked:
        try:
            return await ranker.rerank_async(query, documents, top_n=top_n)
        except RerankUnreadable as exc:
            # A reply we could not use was billed all the same.
            if exc.spent is not None:
                _count_rerank(call, attempts.current.connection, attempts.current.model, exc.spent)
            raise

    with _estimated_if_cancelled(unanswered):
        reranked = await routed_chat.answer(call, plan, attempts, ranked, open_target=open_target)
    target = attempts.current
    call.model = target.model
    call.rerank_outcome = RerankOutcome.RERANKED
    _count_rerank(call, target.connection, target.model, reranked)
    meta: dict[str, Any] = {"tokens": {"input_tokens": reranked.input_tokens, "output_tokens": reranked.output_tokens}}
    if reranked.search_units is not None:
        meta["billed_units"] = {"search_units": reranked.search_units}
    results = [
        {"index": ranked.index, "relevance_score": ranked.relevance_score} for ranked in reranked.ranking[:top_n]
    ]
    if data["return_documents"]:
        for result in results:
            result["document"] = {"text": documents[result["index"]]}
    return JsonResponse(
        {
            "id": getattr(request, "request_id", ""),
            "results": results,
            "meta": meta,
            "usage": {
                "prompt_tokens": reranked.input_tokens,
                "completion_tokens": reranked.output_tokens,
                "total_tokens": reranked.tokens,
            },
        }
    )


# --------------------------------------------------------------------------------------------
# GET /v1/models, GET /v1/models/{id}
# --------------------------------------------------------------------------------------------


# Who a route is "owned by" in its model object: the gateway, which picks the upstream.
ROUTE_OWNER = "ragmux"


def _model_object(name: str, created, owned_by: str) -> dict:
    return {"id": name, "object": "model", "created": int(created.timestamp()), "owned_by": owned_by}


async def _model_objects(call: Call) -> list[dict]:
    """The project's chat and embedding models, then the routes its keys may name (its chat
    route among them); a route named like a model stands for it, as a call naming it goes to
    the route."""
    project = call.project
    objects: dict[str, dict] = {}
    for connection in (project.chat_connection, project.embedding_connection):
        if connection is not None and connection.model_name not in objects:
            objects[connection.model_name] = _model_object(
                connection.model_name, connection.created_at, connection.provider_type
            )
    for route in await selectors.project_route_names(project=project):
        objects[route.name] = _model_object(route.name, route.created_at, ROUTE_OWNER)
    return list(objects.values())


@v1_endpoint(endpoint=Endpoint.MODELS, scope=Scope.MODELS, methods=("GET",))
async def models(request: HttpRequest, call: Call) -> HttpResponse:
    return JsonResponse({"object": "list", "data": await _model_objects(call)})


@v1_endpoint(endpoint=Endpoint.MODELS, scope=Scope.MODELS, methods=("GET",))
async def model(request: HttpRequest, call: Call, model_id: str) -> HttpResponse:
    for item in await _model_objects(call):
        if item["id"] == model_id:
            return JsonResponse(item)
    raise NotFound(f"no model {model_id!r} for this project", code="model_not_found")
