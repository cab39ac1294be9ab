"""The embedding adapters' translation, without a network: the request each sends and how each
reads a reply into vectors and a token count. (test_embeddings_upstream.py runs them
against the fake upstreams.)"""

from __future__ import annotations

import pytest

from gateway.connections.providers.embeddings import (
    CustomOpenAIEmbeddings,
    GeminiEmbeddings,
    OllamaEmbeddings,
    OpenAIEmbeddings,
    effective_base_url,
)
from ragmux.core.errors import UpstreamFailed

TEXTS = ["alpha", "beta"]


def adapter(kind, *, dimensions=None):
    return kind(
        base_url="https://upstream.test",
        api_key="sk-secret-0123456789",
        model="emb",
        dimensions=dimensions,
        timeout=None,
    )


@pytest.mark.parametrize(
    ("dimensions", "body"),
    [(None, {"model": "emb", "input": TEXTS}), (256, {"model": "emb", "input": TEXTS, "dimensions": 256})],
)
@pytest.mark.parametrize("kind", [OpenAIEmbeddings, OllamaEmbeddings])
def test_openai_and_ollama_requests_send_the_texts_as_input(kind, dimensions, body):
    assert adapter(kind, dimensions=dimensions)._inputs(TEXTS) == body


@pytest.mark.parametrize(
    ("texts", "dimensions", "request_"),
    [
        (
            ["alpha"],
            None,
            (
                "https://upstream.test/models/emb:embedContent",
                {"model": "models/emb", "content": {"parts": [{"text": "alpha"}]}},
            ),
        ),
        (
            TEXTS,
            64,
            (
                "https://upstream.test/models/emb:batchEmbedContents",
                {
                    "requests": [
                        {"model": "models/emb", "content": {"parts": [{"text": t}]}, "outputDimensionality": 64}
                        for t in TEXTS
                    ]
                },
            ),
        ),
    ],
)
def test_gemini_embeds_one_text_by_embed_content_and_more_by_a_batch(texts, dimensions, request_):
    assert adapter(GeminiEmbeddings, dimensions=dimensions).request(texts) == request_


@pytest.mark.parametrize(
    ("kind", "reply", "vectors", "tokens", "reported"),
    [
        # OpenAI's items are put back in input order by their index.
        (
            OpenAIEmbeddings,
            {
                "data": [{"index": 1, "embedding": [0, 1]}, {"index": 0, "embedding": [1, 0]}],
                "usage": {"prompt_tokens": 3},
            },
            [[1, 0], [0, 1]],
            3,
            True,
        ),
        (
            CustomOpenAIEmbeddings,
            {"data": [{"embedding": [1, 0]}, {"embedding": [0, 1]}], "usage": {"total_tokens": 4}},
            [[1, 0], [0, 1]],
            4,
            True,
        ),
        # Without a usable count, an estimate of characters / 4: "alphabeta" is 9 characters.
        (
            OpenAIEmbeddings,
            {"data": [{"embedding": [1]}, {"embedding": [2]}], "usage": {"prompt_tokens": -1}},
            [[1], [2]],
            3,
            False,
        ),
        (
            OllamaEmbeddings,
            {"embeddings": [[0.5, 0.5], [1.0, 0.0]], "prompt_eval_count": 6},
            [[0.5, 0.5], [1.0, 0.0]],
            6,
            True,
        ),
        (OllamaEmbeddings, {"embeddings": [[0.5], [1.0]], "prompt_eval_count": True}, [[0.5], [1.0]], 3, False),
        # Gemini reports no tokens at all.
        (GeminiEmbeddings, {"embeddings": [{"values": [1, 2]}, {"values": [3, 4]}]}, [[1, 2], [3, 4]], 3, False),
    ],
)
def test_replies_become_vectors_in_input_order_with_their_tokens(kind, reply, vectors, tokens, reported):
    embeddings = adapter(kind).read(reply, TEXTS)
    assert (embeddings.vectors, embeddings.tokens, embeddings.tokens_reported) == (vectors, tokens, reported)
    assert embeddings.dimensions == len(vectors[0])


def test_gemini_reads_one_texts_reply_from_embedding():
    assert adapter(GeminiEmbeddings).read({"embedding": {"values": [0.1, 0.2]}}, ["alpha"]).vectors == [[0.1, 0.2]]


@pytest.mark.parametrize(
    ("kind", "reply", "message"),
    [
        (OpenAIEmbeddings, {"embeddings": []}, "malformed body (no data list)"),
        (OpenAIEmbeddings, {"data": [{"vector": [1]}, {"embedding": [1]}]}, "malformed body (item without embedding)"),
        (OpenAIEmbeddings, {"data": [{"embedding": [1]}]}, "1 embeddings for 2 inputs"),
        (OllamaEmbeddings, [[1], [2]], "malformed body (no embeddings)"),
        (OllamaEmbeddings, {"embeddings": [[1, 2], [1]]}, "embeddings of different widths (2 and 1)"),
        (OllamaEmbeddings, {"embeddings": [[1], ["x"]]}, "non-numeric or non-finite"),
        (OllamaEmbeddings, {"embeddings": [[1], [float("nan")]]}, "non-numeric or non-finite"),
        (OllamaEmbeddings, {"embeddings": [[1], []]}, "not a list of numbers"),
        (GeminiEmbeddings, {"embedding": {"values": [1]}}, "malformed body (no embeddings)"),
        (GeminiEmbeddings, {"embeddings": [{"values": [1]}, "x"]}, "not a list of numbers"),
    ],
)
def test_malformed_replies_are_refused_saying_why(kind, reply, message):
    with pytest.raises(UpstreamFailed) as raised:
        adapter(kind).read(reply, TEXTS)
    assert message in str(raised.value)
    assert raised.value.retryable is False


def test_vectors_of_another_width_than_the_connections_are_refused():
    with pytest.raises(UpstreamFailed, match="returned 2-dimensional embeddings but the connection expects 3"):
        adapter(OllamaEmbeddings, dimensions=3).read({"embeddings": [[1, 2], [3, 4]]}, TEXTS)


@pytest.mark.parametrize(
    ("provider_type", "base_url", "effective"),
    [
        ("openai", "", "https://api.openai.com/v1"),
        ("openai", "https://proxy.test/", "https://proxy.test/v1"),
        ("openai", "https://proxy.test/v1/", "https://proxy.test/v1"),
        ("ollama", "http://gpu:11434/v1", "http://gpu:11434"),
        ("ollama", "", "http://localhost:11434"),
        ("gemini", "", "https://generativelanguage.googleapis.com/v1beta"),
        ("custom_openai", "http://vllm:8000/v1/", "http://vllm:8000/v1"),
    ],
)
def test_the_base_url_an_adapter_calls(provider_type, base_url, effective):
    assert effective_base_url(provider_type, base_url) == effective
