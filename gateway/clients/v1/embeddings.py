"""POST /v1/embeddings."""

from __future__ import annotations

import base64
import functools

import numpy as np
from django.http import HttpRequest, HttpResponse, JsonResponse

from gateway.clients import limiter
from gateway.clients.ledger import Call, Spend
from gateway.clients.models import Endpoint, Scope
from gateway.clients.serializers import EmbeddingsInput
from gateway.clients.v1.endpoint import json_body, v1_endpoint, validated
from gateway.clients.v1.spend import count_embedding, estimated_if_cancelled
from gateway.connections.models import ModelConnection
from gateway.connections.providers.embeddings import embedding_provider, estimate_tokens
from ragmux.core.errors import (
    InvalidInput,
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
    data = validated(EmbeddingsInput, json_body(request))
    connection = call.project.embedding_connection
    if connection is None:
        raise InvalidInput("this project has no embedding connection", code="no_embedding_connection")
    call.model = connection.model_name
    estimated = estimate_tokens(data["input"])
    spend = Spend(connection.provider_type, connection.model_name, estimated)
    await limiter.admit(call, tokens=estimated, spends=[spend])
    estimate = functools.partial(count_embedding, call, connection, estimated, reported=False)
    with estimated_if_cancelled(estimate):
        vectors, tokens, reported = await _embed_all(connection, data["input"])
    count_embedding(call, connection, tokens, reported=reported)
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
