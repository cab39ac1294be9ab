"""Chat providers behind one interface.

A provider takes an OpenAI-format chat request body and answers in OpenAI format: a
``chat.completion`` object from ``complete``, or ``chat.completion.chunk`` objects from
``stream`` (the interface and what the adapters share are in ``chat_base``). Adapters for
providers with another wire format (Anthropic, Gemini, Ollama) translate both ways, so the
client API only ever sees one shape.

Every failure is a :class:`ChatError` carrying the status and OpenAI error fields the client
should get: upstream 4xx/5xx answers keep their status (or the closest one a client's SDK
understands), timeouts are 504 and transport failures 502. Retryable failures are retried
with backoff, but only before anything was relayed.
"""

from __future__ import annotations

from gateway.connections.credentials import open_api_key
from gateway.connections.models import Capability, ModelConnection, ProviderType, why_cannot
from gateway.connections.providers.chat_anthropic import AnthropicChat
from gateway.connections.providers.chat_base import ChatError, ChatProvider, ChatStream, NoChat
from gateway.connections.providers.chat_gemini import GeminiChat
from gateway.connections.providers.chat_ollama import OllamaChat
from gateway.connections.providers.chat_openai import CustomOpenAIChat, OpenAIChat
from gateway.connections.providers.embeddings import effective_base_url

__all__ = ["ChatError", "ChatProvider", "ChatStream", "NoChat", "chat_provider"]

# One adapter for every provider type that models.CHAT_PROVIDERS says can chat.
_CHAT_PROVIDERS: dict[str, type[ChatProvider]] = {
    ProviderType.OPENAI: OpenAIChat,
    ProviderType.CUSTOM_OPENAI: CustomOpenAIChat,
    ProviderType.ANTHROPIC: AnthropicChat,
    ProviderType.GEMINI: GeminiChat,
    ProviderType.OLLAMA: OllamaChat,
}


def chat_provider(connection: ModelConnection) -> ChatProvider:
    refusal = why_cannot(connection, Capability.CHAT)
    if refusal is not None:
        raise NoChat(refusal)
    return _CHAT_PROVIDERS[connection.provider_type](
        base_url=effective_base_url(connection.provider_type, connection.base_url),
        api_key=open_api_key(connection),
        model=connection.model_name,
    )
