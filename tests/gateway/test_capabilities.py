"""Whether a connection can chat, embed or rerank: one function decides and words every refusal."""

from __future__ import annotations

import pytest

from gateway.connections.models import Capability, ModelConnection, ProviderType, why_cannot

CAN = {
    Capability.CHAT: {"openai", "custom_openai", "azure_openai", "ollama", "gemini", "anthropic"},
    Capability.EMBED: {"openai", "custom_openai", "azure_openai", "ollama", "gemini", "local"},
}
# Reranking, by the store's rerank backend: the dedicated APIs need their own provider, the llm
# backend a connection that can chat.
CAN_RERANK = {"cohere": {"cohere_rerank"}, "voyage": {"voyage_rerank"}, "llm": CAN[Capability.CHAT]}


@pytest.mark.parametrize("provider_type", ProviderType.values)
@pytest.mark.parametrize("capability", [Capability.CHAT, Capability.EMBED])
def test_chat_and_embeddings_by_provider_type(provider_type, capability):
    connection = ModelConnection(name="c", provider_type=provider_type)
    refusal = why_cannot(connection, capability)
    if provider_type in CAN[capability]:
        assert refusal is None
    else:
        assert refusal == f'the {provider_type} connection "c" cannot {capability}'


@pytest.mark.parametrize("provider_type", ProviderType.values)
@pytest.mark.parametrize("backend", CAN_RERANK)
def test_reranking_by_backend(provider_type, backend):
    connection = ModelConnection(name="c", provider_type=provider_type)
    refusal = why_cannot(connection, Capability.RERANK, rerank_backend=backend)
    if provider_type in CAN_RERANK[backend]:
        assert refusal is None
    else:
        assert refusal == f'the {provider_type} connection "c" cannot rerank with the {backend} backend'


def test_supports_embeddings_is_the_same_answer():
    for provider_type in ProviderType.values:
        connection = ModelConnection(name="c", provider_type=provider_type)
        assert connection.supports_embeddings is (why_cannot(connection, Capability.EMBED) is None)
