"""Chat providers behind one interface.

A provider takes an OpenAI-format chat request body and answers in OpenAI format: a
``chat.completion`` object from ``complete``, or ``chat.completion.chunk`` objects from
``stream``. Adapters for providers with another wire format (Anthropic, Gemini, Ollama)
translate both ways, so the client API only ever sees one shape. The interface and its calls are
``chat_interface``; what the adapters share is ``chat_request`` (reading the OpenAI request),
``chat_reply`` (building OpenAI's replies), ``stream_framing`` (SSE and NDJSON) and
``upstream_errors`` (a provider's failure as an ``UpstreamFailed``).

Every failure is a :class:`~ragmux.core.errors.ServiceError` kind: a request the provider's
format cannot say is ``InvalidInput``; the rest are ``UpstreamFailed``, whose upstream 4xx/5xx
answers keep their status (or the closest one a client's SDK understands); timeouts are
``UpstreamTimeout``. Retryable failures are retried with backoff, but only before anything was
relayed.
"""

from __future__ import annotations

from gateway.connections.credentials import open_api_key
from gateway.connections.models import Capability, ModelConnection, ProviderType, why_cannot
from gateway.connections.providers.chat_anthropic import AnthropicChat
from gateway.connections.providers.chat_gemini import GeminiChat
from gateway.connections.providers.chat_interface import ChatProvider, ChatStream, SingleAttempt
from gateway.connections.providers.chat_ollama import OllamaChat
from gateway.connections.providers.chat_openai import AzureOpenAIChat, CustomOpenAIChat, OpenAIChat
from gateway.connections.providers.embeddings import adapter_options, effective_base_url
from ragmux.core.errors import Conflict

__all__ = ["ChatProvider", "ChatStream", "NoChat", "SingleAttempt", "chat_provider"]


class NoChat(Conflict):
    """The connection's provider type cannot answer chat requests."""

    code = "chat_unavailable"


# One adapter for every provider type that models.CHAT_PROVIDERS says can chat.
_CHAT_PROVIDERS: dict[str, type[ChatProvider]] = {
    ProviderType.OPENAI: OpenAIChat,
    ProviderType.CUSTOM_OPENAI: CustomOpenAIChat,
    ProviderType.AZURE_OPENAI: AzureOpenAIChat,
    ProviderType.ANTHROPIC: AnthropicChat,
    ProviderType.GEMINI: GeminiChat,
    ProviderType.OLLAMA: OllamaChat,
}


def chat_provider(connection: ModelConnection, *, model: str = "") -> ChatProvider:
    """The connection's adapter, asking for ``model`` (a route's target may name another model
    than its connection's), else for the connection's own."""
    refusal = why_cannot(connection, Capability.CHAT)
    if refusal is not None:
        raise NoChat(refusal)
    return _CHAT_PROVIDERS[connection.provider_type](
        base_url=effective_base_url(connection.provider_type, connection.base_url),
        api_key=open_api_key(connection),
        model=model or connection.model_name,
        **adapter_options(connection),
    )
