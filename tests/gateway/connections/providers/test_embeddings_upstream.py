"""Each embedding adapter against the fake upstream speaking its provider's wire format."""

import numpy as np
import pytest

from gateway.connections.models import ModelConnection
from gateway.connections.providers.embeddings import NoEmbeddings, embedding_provider, estimate_tokens
from gateway.connections.services import connection_create
from ragmux.core.errors import UpstreamFailed, UpstreamTimeout
from tests.fakes.upstream import fake_vector

ADAPTERS = {
    "openai": ("openai.embeddings", "/v1"),
    "custom_openai": ("openai.embeddings", "/v1"),
    "ollama": ("ollama.embed", ""),
    "gemini": ("gemini.batch_embed", "/v1beta"),
}


def connection_for(fake_upstream, provider_type, *, dimensions=None, api_key="sk-test-key-abcdefghij"):
    suffix = ADAPTERS[provider_type][1]
    return connection_create(
        name=f"{provider_type}-conn",
        provider_type=provider_type,
        base_url=f"{fake_upstream.url}{suffix}",
        model_name="embed-model",
        dimensions=dimensions,
        api_key=api_key,
    )


@pytest.mark.django_db
@pytest.mark.parametrize("provider_type", ADAPTERS)
def test_vectors_come_back_in_input_order(fake_upstream, provider_type):
    provider = embedding_provider(connection_for(fake_upstream, provider_type))
    result = provider.embed(["alpha", "beta", "gamma"])
    np.testing.assert_allclose(result.vectors, [fake_vector(t, 8) for t in ("alpha", "beta", "gamma")])
    assert result.dimensions == 8
    assert fake_upstream.calls(ADAPTERS[provider_type][0]) == 1


@pytest.mark.django_db
@pytest.mark.parametrize(("provider_type", "reported"), [("openai", True), ("ollama", True), ("gemini", False)])
def test_token_usage_is_reported_or_estimated(fake_upstream, provider_type, reported):
    texts = ["one two three", "four five"]
    result = embedding_provider(connection_for(fake_upstream, provider_type)).embed(texts)
    assert result.tokens_reported is reported
    assert result.tokens == (5 if reported else estimate_tokens(texts))


@pytest.mark.django_db
@pytest.mark.parametrize("provider_type", ["openai", "ollama"])
def test_missing_usage_falls_back_to_an_estimate(fake_upstream, provider_type):
    fake_upstream.configure(ADAPTERS[provider_type][0], omit_usage=True)
    result = embedding_provider(connection_for(fake_upstream, provider_type)).embed(["abcdefgh"])
    assert result.tokens_reported is False
    assert result.tokens == 2


@pytest.mark.django_db
def test_gemini_uses_embed_content_for_one_text(fake_upstream):
    result = embedding_provider(connection_for(fake_upstream, "gemini")).embed(["solo"])
    np.testing.assert_allclose(result.vectors, [fake_vector("solo", 8)])
    assert fake_upstream.calls("gemini.embed") == 1
    assert fake_upstream.calls("gemini.batch_embed") == 0
    sent = fake_upstream.requests_to("gemini.embed")[0]
    assert sent.path == "/v1beta/models/embed-model:embedContent"
    assert sent.headers["x-goog-api-key"] == "sk-test-key-abcdefghij"


@pytest.mark.django_db
def test_requests_carry_model_credentials_and_dimensions(fake_upstream):
    embedding_provider(connection_for(fake_upstream, "openai", dimensions=8)).embed(["x"])
    sent = fake_upstream.requests_to("openai.embeddings")[0]
    assert sent.headers["authorization"] == "Bearer sk-test-key-abcdefghij"
    assert sent.json() == {"model": "embed-model", "input": ["x"], "dimensions": 8}


@pytest.mark.django_db
def test_ollama_without_a_key_sends_no_authorization(fake_upstream):
    embedding_provider(connection_for(fake_upstream, "ollama", api_key="")).embed(["x"])
    assert "authorization" not in fake_upstream.requests_to("ollama.embed")[0].headers


@pytest.mark.django_db
@pytest.mark.parametrize("provider_type", ADAPTERS)
@pytest.mark.parametrize(("status", "retryable"), [(429, True), (500, True), (503, True), (400, False), (401, False)])
def test_error_statuses_say_whether_a_retry_may_help(fake_upstream, provider_type, status, retryable):
    fake_upstream.configure(ADAPTERS[provider_type][0], status=status)
    with pytest.raises(UpstreamFailed) as failure:
        embedding_provider(connection_for(fake_upstream, provider_type)).embed(["a", "b"])
    assert failure.value.retryable is retryable
    assert failure.value.upstream_status == status
    assert f"HTTP {status}" in str(failure.value)
    assert "fake upstream failure" in str(failure.value)


@pytest.mark.django_db
@pytest.mark.parametrize("provider_type", ADAPTERS)
@pytest.mark.parametrize("malformed", ["not_json", "wrong_shape"])
def test_malformed_replies_are_clear_non_retryable_errors(fake_upstream, provider_type, malformed):
    fake_upstream.configure(ADAPTERS[provider_type][0], malformed=malformed)
    with pytest.raises(UpstreamFailed, match="malformed|returned 0 embeddings|returned no embeddings") as failure:
        embedding_provider(connection_for(fake_upstream, provider_type)).embed(["a", "b"])
    assert failure.value.retryable is False


@pytest.mark.django_db
@pytest.mark.parametrize("provider_type", ADAPTERS)
def test_vectors_of_different_widths_are_refused(fake_upstream, provider_type):
    fake_upstream.configure(ADAPTERS[provider_type][0], wrong_width=True)
    with pytest.raises(UpstreamFailed, match="different widths"):
        embedding_provider(connection_for(fake_upstream, provider_type)).embed(["a", "b"])


@pytest.mark.django_db
@pytest.mark.parametrize("provider_type", ADAPTERS)
def test_a_width_other_than_the_configured_dimensions_is_refused(fake_upstream, provider_type):
    fake_upstream.configure(ADAPTERS[provider_type][0], width=16)
    with pytest.raises(UpstreamFailed, match="16-dimensional embeddings but the connection expects 8"):
        embedding_provider(connection_for(fake_upstream, provider_type, dimensions=8)).embed(["a", "b"])


@pytest.mark.django_db
def test_a_slow_upstream_is_a_retryable_timeout(fake_upstream):
    fake_upstream.configure("openai.embeddings", latency=1.0)
    connection = connection_for(fake_upstream, "openai")
    with pytest.raises(UpstreamTimeout, match="timed out") as failure:
        embedding_provider(connection, timeout=0.2).embed(["a"])
    assert failure.value.retryable is True


@pytest.mark.django_db
@pytest.mark.parametrize("provider_type", ["anthropic", "cohere_rerank", "voyage_rerank"])
def test_types_without_embeddings_are_refused(provider_type):
    connection = ModelConnection(name="x", provider_type=provider_type, model_name="m")
    with pytest.raises(NoEmbeddings, match=f'the {provider_type} connection "x" cannot embed'):
        embedding_provider(connection)


@pytest.mark.django_db
def test_the_local_model_embeds_meaning_offline(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # any attempt to reach a network would fail
    connection = connection_create(
        name="local", provider_type="local", base_url="", model_name="all-MiniLM-L6-v2", dimensions=None, api_key=""
    )
    result = embedding_provider(connection).embed(
        ["How do I reset my password?", "I forgot my login", "The recipe needs flour"]
    )
    question, forgot, recipe = (np.array(v) for v in result.vectors)
    assert result.dimensions == 384
    assert np.linalg.norm(question) == pytest.approx(1.0, abs=1e-5)
    assert question @ forgot > question @ recipe + 0.2
    assert result.tokens_reported is True
    assert result.tokens > 10


@pytest.mark.django_db
def test_the_local_model_is_independent_of_batch_composition():
    connection = connection_create(
        name="local", provider_type="local", base_url="", model_name="all-MiniLM-L6-v2", dimensions=None, api_key=""
    )
    provider = embedding_provider(connection)
    alone = provider.embed(["a short text"]).vectors[0]
    together = provider.embed(["a much longer text that pads the batch " * 5, "a short text"]).vectors[1]
    assert together == pytest.approx(alone, abs=1e-4)
