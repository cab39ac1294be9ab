"""What a `/v1` call spent, onto its request log row: tokens counted, or estimated when the
client left before the upstream said."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from gateway.clients.ledger import Call, Spend
from gateway.connections.models import ModelConnection
from gateway.connections.providers.embeddings import estimate_tokens
from gateway.connections.providers.rerank import (
    Reranked,
)
from stores.models import RagStore


@contextmanager
def estimated_if_cancelled(estimate: Callable[[], None]) -> Iterator[None]:
    """Around work that spends tokens the client may walk away from: the upstream is not asked for
    its count then, so ``estimate`` records the spend."""
    try:
        yield
    except asyncio.CancelledError:
        estimate()
        raise


def count_embedding(call: Call, connection: ModelConnection, tokens: int, *, reported: bool) -> None:
    call.embedding_tokens, call.tokens_estimated = tokens, not reported
    call.spends.append(Spend(connection.provider_type, connection.model_name, tokens))


def count_rerank(call: Call, connection: ModelConnection, model: str, reranked: Reranked) -> None:
    """A rerank's tokens onto the call's row, priced by the connection (and model) that ran it."""
    call.rerank_tokens += reranked.tokens
    call.tokens_estimated = call.tokens_estimated or not reranked.tokens_reported
    call.spends.append(Spend.of_rerank(connection.provider_type, model, reranked))


def query_spend(store: RagStore, query: str) -> Spend:
    embedder = store.embedding_connection
    return Spend(embedder.provider_type, embedder.model_name, estimate_tokens([query]))
