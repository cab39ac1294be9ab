"""Embedding providers behind one interface.

``provider.embed(texts)`` makes one upstream call for at most ``provider.max_batch`` texts and
returns the vectors in input order with the tokens spent: the upstream's own count when it
reports one, otherwise an estimate of characters / 4. ``await provider.embed_async(texts)`` is
the same call made from the event loop (the client API), ended when its caller is cancelled.
Every failure is an :class:`~ragmux.core.errors.UpstreamFailed` whose ``retryable`` says whether
trying again may help.
"""

from __future__ import annotations

import asyncio
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

from gateway.connections import http
from gateway.connections.credentials import open_api_key
from gateway.connections.models import DEFAULT_BASE_URLS, Capability, ModelConnection, ProviderType, why_cannot
from gateway.connections.providers import azure
from gateway.connections.providers.upstream_errors import Classify, by_status, json_answer, malformed
from ragmux.core.crypto import DecryptionFailed
from ragmux.core.errors import Conflict, UpstreamFailed

# Rate limits, conflicts and every server error may pass; ingestion retries them with backoff.
RETRYABLE_STATUSES = frozenset({408, 409, 425, 429, *range(500, 600)})


@dataclass(frozen=True)
class Embeddings:
    vectors: list[list[float]]
    tokens: int
    tokens_reported: bool

    @property
    def dimensions(self) -> int:
        return len(self.vectors[0]) if self.vectors else 0


def estimate_tokens(texts: Sequence[str]) -> int:
    return math.ceil(sum(len(t) for t in texts) / 4)


class EmbeddingProvider(ABC):
    label: str = "embedding provider"
    max_batch: int = 64

    def __init__(self, *, model: str, dimensions: int | None):
        self.model = model
        self.dimensions = dimensions

    @abstractmethod
    def embed(self, texts: Sequence[str]) -> Embeddings:
        """Embeds at most ``max_batch`` texts in one call."""

    async def embed_async(self, texts: Sequence[str]) -> Embeddings:
        """:meth:`embed` for a caller on the event loop; a model that computes in this process
        does so in a worker thread, so the loop keeps serving."""
        return await asyncio.to_thread(self.embed, texts)

    def _check_vectors(self, vectors: object, count: int) -> list[list[float]]:
        if not isinstance(vectors, list) or len(vectors) != count:
            got = len(vectors) if isinstance(vectors, list) else "no"
            raise malformed(self.label, f"reply: {got} embeddings for {count} inputs")
        width = None
        for vector in vectors:
            if not isinstance(vector, list) or not vector:
                raise malformed(self.label, "embedding: not a list of numbers")
            if width is None:
                width = len(vector)
            elif len(vector) != width:
                raise malformed(self.label, f"reply: embeddings of different widths ({width} and {len(vector)})")
            if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in vector):
                raise malformed(self.label, "embedding: non-numeric or non-finite values")
        if self.dimensions and width != self.dimensions:
            raise UpstreamFailed(
                f"{self.label} returned {width}-dimensional embeddings but the connection expects {self.dimensions}",
                code="dimensions_mismatch",
            )
        return vectors


class _HttpEmbeddingProvider(EmbeddingProvider):
    # How the provider's error bodies become the status, type and code a client gets.
    classify: Classify = staticmethod(by_status)

    def __init__(self, *, base_url: str, api_key: str, model: str, dimensions: int | None, timeout: float | None):
        super().__init__(model=model, dimensions=dimensions)
        self.base_url = base_url
        self.api_key = api_key
        self.timeout = timeout

    def _bearer(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def _inputs(self, texts: Sequence[str]) -> dict:
        body: dict = {"model": self.model, "input": list(texts)}
        if self.dimensions:
            body["dimensions"] = self.dimensions
        return body

    @staticmethod
    def _counted(vectors: list[list[float]], texts: Sequence[str], reported: object) -> Embeddings:
        """The upstream's token count when it gave a usable one, else an estimate."""
        if isinstance(reported, int) and not isinstance(reported, bool) and reported >= 0:
            return Embeddings(vectors, reported, True)
        return Embeddings(vectors, estimate_tokens(texts), False)

    @abstractmethod
    def _request(self, texts: Sequence[str]) -> tuple[str, dict, dict[str, str]]:
        """The URL, body and headers of the call for ``texts``."""

    @abstractmethod
    def read(self, reply: object, texts: Sequence[str]) -> Embeddings:
        """The embeddings of ``texts`` in the provider's reply."""

    def _reply(self, status: int, content: bytes, headers) -> object:
        return json_answer(
            label=self.label,
            secret=self.api_key,
            status=status,
            content=content,
            headers=headers,
            retryable_statuses=RETRYABLE_STATUSES,
            classify=self.classify,
        )

    def embed(self, texts: Sequence[str]) -> Embeddings:
        url, body, headers = self._request(texts)
        response = http.request("POST", url, headers=headers, json_body=body, timeout=self.timeout)
        return self.read(self._reply(response.status, response.content, response.headers), texts)

    async def embed_async(self, texts: Sequence[str]) -> Embeddings:
        url, body, headers = self._request(texts)
        async with http.open_stream("POST", url, headers=headers, json_body=body, timeout=self.timeout) as upstream:
            content = await upstream.read()
        return self.read(self._reply(upstream.status, content, upstream.headers), texts)


def _require(condition: bool, label: str, what: str) -> None:
    if not condition:
        raise malformed(label, f"body ({what})")


class OpenAIEmbeddings(_HttpEmbeddingProvider):
    label = "openai"
    max_batch = 256

    def _request(self, texts: Sequence[str]) -> tuple[str, dict, dict[str, str]]:
        return f"{self.base_url}/embeddings", self._inputs(texts), self._bearer()

    def read(self, reply: object, texts: Sequence[str]) -> Embeddings:
        """The embeddings of ``texts`` in an ``/embeddings`` reply."""
        _require(isinstance(reply, dict) and isinstance(reply.get("data"), list), self.label, "no data list")
        items = reply["data"]
        _require(all(isinstance(i, dict) and "embedding" in i for i in items), self.label, "item without embedding")
        if all(isinstance(i.get("index"), int) for i in items):
            items = sorted(items, key=lambda i: i["index"])
        vectors = self._check_vectors([i["embedding"] for i in items], len(texts))
        usage = reply.get("usage") if isinstance(reply.get("usage"), dict) else {}
        return self._counted(vectors, texts, usage.get("prompt_tokens", usage.get("total_tokens")))


class CustomOpenAIEmbeddings(OpenAIEmbeddings):
    label = "custom_openai"


class AzureOpenAIEmbeddings(OpenAIEmbeddings):
    """OpenAI's embeddings under Azure's paths and key header (see azure.py)."""

    label = "azure_openai"
    classify = staticmethod(azure.classify)

    def __init__(self, *, api_version: str, **kwargs):
        super().__init__(**kwargs)
        self.api_version = api_version

    def _request(self, texts: Sequence[str]) -> tuple[str, dict, dict[str, str]]:
        url = azure.operation_url(
            self.base_url, deployment=self.model, api_version=self.api_version, operation="embeddings"
        )
        return url, self._inputs(texts), azure.headers(self.api_key)


class OllamaEmbeddings(_HttpEmbeddingProvider):
    label = "ollama"
    max_batch = 64

    def _request(self, texts: Sequence[str]) -> tuple[str, dict, dict[str, str]]:
        return f"{self.base_url}/api/embed", self._inputs(texts), self._bearer()

    def read(self, reply: object, texts: Sequence[str]) -> Embeddings:
        """The embeddings of ``texts`` in an ``/api/embed`` reply."""
        _require(isinstance(reply, dict) and "embeddings" in reply, self.label, "no embeddings")
        vectors = self._check_vectors(reply["embeddings"], len(texts))
        return self._counted(vectors, texts, reply.get("prompt_eval_count"))


class GeminiEmbeddings(_HttpEmbeddingProvider):
    label = "gemini"
    max_batch = 100

    def _content(self, text: str) -> dict:
        item: dict = {"model": f"models/{self.model}", "content": {"parts": [{"text": text}]}}
        if self.dimensions:
            item["outputDimensionality"] = self.dimensions
        return item

    def request(self, texts: Sequence[str]) -> tuple[str, dict]:
        """The URL and body of the call for ``texts``: one text has a method of its own."""
        model_path = f"{self.base_url}/models/{quote(self.model, safe='')}"
        if len(texts) == 1:
            return f"{model_path}:embedContent", self._content(texts[0])
        return f"{model_path}:batchEmbedContents", {"requests": [self._content(t) for t in texts]}

    def _request(self, texts: Sequence[str]) -> tuple[str, dict, dict[str, str]]:
        headers = {"x-goog-api-key": self.api_key} if self.api_key else {}
        return *self.request(texts), headers

    def read(self, reply: object, texts: Sequence[str]) -> Embeddings:
        """The embeddings of ``texts`` in an ``embedContent`` or ``batchEmbedContents`` reply."""
        if len(texts) == 1:
            _require(isinstance(reply, dict) and isinstance(reply.get("embedding"), dict), self.label, "no embedding")
            raw = [reply["embedding"].get("values")]
        else:
            _require(isinstance(reply, dict) and isinstance(reply.get("embeddings"), list), self.label, "no embeddings")
            raw = [e.get("values") if isinstance(e, dict) else None for e in reply["embeddings"]]
        # Gemini reports no token usage for embeddings.
        return self._counted(self._check_vectors(raw, len(texts)), texts, None)


class LocalEmbeddings(EmbeddingProvider):
    label = "local"
    max_batch = 32

    def embed(self, texts: Sequence[str]) -> Embeddings:
        from gateway.connections.providers.local_model import local_model

        vectors, tokens = local_model().embed(list(texts))
        return Embeddings(self._check_vectors(vectors, len(texts)), tokens, True)


_HTTP_PROVIDERS: dict[str, type[_HttpEmbeddingProvider]] = {
    ProviderType.OPENAI: OpenAIEmbeddings,
    ProviderType.CUSTOM_OPENAI: CustomOpenAIEmbeddings,
    ProviderType.AZURE_OPENAI: AzureOpenAIEmbeddings,
    ProviderType.OLLAMA: OllamaEmbeddings,
    ProviderType.GEMINI: GeminiEmbeddings,
}


def effective_base_url(provider_type: str, base_url: str) -> str:
    url = (base_url or DEFAULT_BASE_URLS.get(provider_type, "")).rstrip("/")
    if provider_type == ProviderType.OPENAI and not url.endswith("/v1"):
        url += "/v1"
    if provider_type == ProviderType.OLLAMA and url.endswith("/v1"):
        url = url[: -len("/v1")]
    if provider_type == ProviderType.AZURE_OPENAI:
        url = azure.resource_url(url)
    return url


def adapter_options(connection: ModelConnection) -> dict[str, str]:
    """What an adapter of the connection's type needs beyond its URL, key and model: Azure's
    ``api_version``."""
    return {"api_version": connection.api_version} if connection.provider_type == ProviderType.AZURE_OPENAI else {}


class NoEmbeddings(Conflict):
    """The connection cannot embed: its provider type cannot, or its API key does not decrypt."""

    code = "embedding_unavailable"


def embedding_provider(connection: ModelConnection, *, timeout: float | None = None) -> EmbeddingProvider:
    refusal = why_cannot(connection, Capability.EMBED)
    if refusal is not None:
        raise NoEmbeddings(refusal)
    if connection.provider_type == ProviderType.LOCAL:
        return LocalEmbeddings(model=connection.model_name, dimensions=connection.dimensions)
    try:
        api_key = open_api_key(connection)
    except DecryptionFailed as exc:
        raise NoEmbeddings(exc.message) from None
    return _HTTP_PROVIDERS[connection.provider_type](
        base_url=effective_base_url(connection.provider_type, connection.base_url),
        api_key=api_key,
        model=connection.model_name,
        dimensions=connection.dimensions,
        timeout=timeout,
        **adapter_options(connection),
    )
