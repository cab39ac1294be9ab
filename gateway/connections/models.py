from __future__ import annotations

from dataclasses import dataclass

from django.db import models


class ProviderType(models.TextChoices):
    OPENAI = "openai", "OpenAI"
    CUSTOM_OPENAI = "custom_openai", "OpenAI-compatible server"
    OLLAMA = "ollama", "Ollama"
    GEMINI = "gemini", "Google Gemini"
    ANTHROPIC = "anthropic", "Anthropic"
    LOCAL = "local", "Built-in local embedder"
    COHERE_RERANK = "cohere_rerank", "Cohere Rerank"
    VOYAGE_RERANK = "voyage_rerank", "Voyage Rerank"
    AZURE_OPENAI = "azure_openai", "Azure OpenAI"


class ProbeMode(models.TextChoices):
    """What a connection test asks of the model: a one-token chat answer, one embedding, or one
    small ranking from a rerank API."""

    CHAT = "chat"
    EMBEDDING = "embedding"
    RERANK = "rerank"


class Capability(models.TextChoices):
    """What a connection is used for."""

    CHAT = "chat"
    EMBED = "embed"
    RERANK = "rerank"


# What each provider type can be used for (reranking aside: see why_cannot).
EMBEDDING_PROVIDERS = frozenset(
    {
        ProviderType.OPENAI,
        ProviderType.CUSTOM_OPENAI,
        ProviderType.AZURE_OPENAI,
        ProviderType.OLLAMA,
        ProviderType.GEMINI,
        ProviderType.LOCAL,
    }
)
CHAT_PROVIDERS = frozenset(
    {
        ProviderType.OPENAI,
        ProviderType.CUSTOM_OPENAI,
        ProviderType.AZURE_OPENAI,
        ProviderType.OLLAMA,
        ProviderType.GEMINI,
        ProviderType.ANTHROPIC,
    }
)
# The dedicated rerank APIs, by the store's `rerank_backend` that uses them; the `llm` backend
# reranks with a chat model.
RERANK_API_PROVIDERS = {"cohere": ProviderType.COHERE_RERANK, "voyage": ProviderType.VOYAGE_RERANK}
# Where a connection of each type calls when its base_url is empty; the types left out have no
# such place (an Azure resource and a self-hosted server are each the user's own).
DEFAULT_BASE_URLS = {
    ProviderType.OPENAI: "https://api.openai.com/v1",
    ProviderType.OLLAMA: "http://localhost:11434",
    ProviderType.GEMINI: "https://generativelanguage.googleapis.com/v1beta",
    ProviderType.ANTHROPIC: "https://api.anthropic.com",
    ProviderType.COHERE_RERANK: "https://api.cohere.com",
    ProviderType.VOYAGE_RERANK: "https://api.voyageai.com",
}
BASE_URL_REQUIRED = frozenset({ProviderType.CUSTOM_OPENAI, ProviderType.AZURE_OPENAI})


@dataclass(frozen=True)
class Preset:
    """A well-known OpenAI-compatible service: a ``custom_openai`` connection with its base URL
    filled in. ``embeddings`` says whether the service has an embeddings API."""

    name: str
    label: str
    base_url: str
    example_model: str
    embeddings: bool


# The presets the connection form offers for ``custom_openai``; their published prices are in
# prices.py under ``custom_openai``.
OPENAI_COMPATIBLE_PRESETS = (
    Preset("mistral", "Mistral", "https://api.mistral.ai/v1", "mistral-small-latest", embeddings=True),
    Preset("xai", "xAI", "https://api.x.ai/v1", "grok-4", embeddings=False),
    Preset("groq", "Groq", "https://api.groq.com/openai/v1", "llama-3.3-70b-versatile", embeddings=False),
    Preset("deepseek", "DeepSeek", "https://api.deepseek.com/v1", "deepseek-chat", embeddings=False),
)
PRESETS = {ProviderType.CUSTOM_OPENAI: OPENAI_COMPATIBLE_PRESETS}


def capabilities_of(provider_type: str) -> dict[str, bool]:
    """What a connection of ``provider_type`` can do, as the connection form shows it. Every chat
    adapter translates tools, images and the usage of a stream, so those follow chat."""
    chat = provider_type in CHAT_PROVIDERS
    return {
        "chat": chat,
        "embeddings": provider_type in EMBEDDING_PROVIDERS,
        "rerank": provider_type in RERANK_API_PROVIDERS.values(),
        "tools": chat,
        "images": chat,
        "streaming_usage": chat,
    }


def connection_fields_of(provider_type: str) -> list[str]:
    """The fields of a connection form that mean something for ``provider_type``: the local
    embedder has no URL and no key, only a type that embeds takes ``dimensions``, and only Azure
    an ``api_version``."""
    local = provider_type == ProviderType.LOCAL
    fields = ["name", "provider_type"]
    if not local:
        fields.append("base_url")
    fields.append("model_name")
    if provider_type in EMBEDDING_PROVIDERS:
        fields.append("dimensions")
    if provider_type == ProviderType.AZURE_OPENAI:
        fields.append("api_version")
    if not local:
        fields.append("api_key")
    return fields


def why_cannot(connection: ModelConnection, capability: str, *, rerank_backend: str | None = None) -> str | None:
    """Why ``connection`` cannot be used for ``capability``, in the one wording every refusal
    uses; None when it can. Reranking depends on the store's ``rerank_backend``: a dedicated rerank
    API needs its own provider type, any other backend a connection that can chat."""
    if capability == Capability.RERANK and rerank_backend in RERANK_API_PROVIDERS:
        able = {RERANK_API_PROVIDERS[rerank_backend]}
    elif capability == Capability.EMBED:
        able = EMBEDDING_PROVIDERS
    else:
        able = CHAT_PROVIDERS
    if connection.provider_type in able:
        return None
    with_backend = f" with the {rerank_backend} backend" if capability == Capability.RERANK and rerank_backend else ""
    return _refusal(connection, f"{capability}{with_backend}")


def _refusal(connection: ModelConnection, use: str) -> str:
    return f'the {connection.provider_type} connection "{connection.name}" cannot {use}'


class ModelConnection(models.Model):
    name = models.CharField(max_length=100, unique=True)
    provider_type = models.CharField(max_length=32, choices=ProviderType.choices)
    base_url = models.CharField(max_length=2048, blank=True, default="")
    # For Azure OpenAI, the deployment's name.
    model_name = models.CharField(max_length=128)
    # Azure OpenAI only: the `api-version` of the classic per-deployment paths; empty: the v1 API.
    api_version = models.CharField(max_length=32, blank=True, default="")
    dimensions = models.PositiveIntegerField(null=True, blank=True)
    # AES-256-GCM sealed, bound to this row's id; never leaves the server.
    api_key_sealed = models.BinaryField(null=True, blank=True)
    api_key_masked = models.CharField(max_length=32, blank=True, default="")
    private_upstream = models.BooleanField(default=False)
    last_test_at = models.DateTimeField(null=True, blank=True)
    last_test_ok = models.BooleanField(null=True, blank=True)
    last_test_latency_ms = models.PositiveIntegerField(null=True, blank=True)
    last_test_dimensions = models.PositiveIntegerField(null=True, blank=True)
    last_test_error = models.CharField(max_length=512, blank=True, default="")
    # What the last test tried (ProbeMode values, in the order tried).
    last_test_modes = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "model_connections"
        ordering = ["id"]

    def __str__(self) -> str:
        return self.name

    @property
    def supports_embeddings(self) -> bool:
        return why_cannot(self, Capability.EMBED) is None


class PriceSource(models.TextChoices):
    BUILTIN = "builtin"
    USER = "user"


# What names a price row's model, and its rates: what the ledger prices a call by, what the API
# shows and what the audit trail keeps.
PRICE_KEY_FIELDS = ("provider_type", "model")
TOKEN_RATE_FIELDS = ("input_per_mtok", "output_per_mtok", "cached_input_per_mtok", "cache_write_per_mtok")
RATE_FIELDS = (*TOKEN_RATE_FIELDS, "per_search_unit")


class ModelPrice(models.Model):
    """USD per million tokens (and per rerank search unit) for one provider's model.

    ``model`` is an exact model name or a pattern ending in ``*``; the longest match wins.
    """

    provider_type = models.CharField(max_length=32, choices=ProviderType.choices)
    model = models.CharField(max_length=128)
    input_per_mtok = models.DecimalField(max_digits=14, decimal_places=6, default=0)
    output_per_mtok = models.DecimalField(max_digits=14, decimal_places=6, default=0)
    # Prompt tokens read from and written to the provider's prompt cache; None: the input rate.
    cached_input_per_mtok = models.DecimalField(max_digits=14, decimal_places=6, null=True, blank=True)
    cache_write_per_mtok = models.DecimalField(max_digits=14, decimal_places=6, null=True, blank=True)
    per_search_unit = models.DecimalField(max_digits=14, decimal_places=6, null=True, blank=True)
    source = models.CharField(max_length=16, choices=PriceSource.choices, default=PriceSource.USER)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "model_prices"
        ordering = ["provider_type", "model"]
        constraints = [models.UniqueConstraint(fields=["provider_type", "model"], name="model_prices_key")]

    def __str__(self) -> str:
        return f"{self.provider_type} {self.model}"


class RouteKind(models.TextChoices):
    """What a route's targets are called for; embedding routes are left out on purpose: a store's
    vectors must all come from one model."""

    CHAT = "chat"
    RERANK = "rerank"


class RouteStrategy(models.TextChoices):
    """``ordered``: each call tries the targets in position order; ``weighted``: smooth weighted
    round-robin picks the first target tried, the others follow as failover."""

    ORDERED = "ordered"
    WEIGHTED = "weighted"


class Route(models.Model):
    """One name clients send as ``model``, answered by one of several targets."""

    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=16, choices=RouteKind.choices, default=RouteKind.CHAT)
    strategy = models.CharField(max_length=16, choices=RouteStrategy.choices, default=RouteStrategy.ORDERED)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "routes"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


# What a route's targets may be, by its kind: a rerank route may fail over between the dedicated
# rerank APIs and chat models (the `llm` backend).
ROUTE_TARGET_PROVIDERS = {
    RouteKind.CHAT: CHAT_PROVIDERS,
    RouteKind.RERANK: CHAT_PROVIDERS | frozenset(RERANK_API_PROVIDERS.values()),
}
# The most targets one route may have: more would only lengthen the failover of a failing call.
MAX_ROUTE_TARGETS = 16


def why_route_cannot_use(connection: ModelConnection, kind: str) -> str | None:
    """Why ``connection`` cannot be a target of a route of ``kind``, worded as `why_cannot` words
    its refusals; None when it can."""
    if connection.provider_type in ROUTE_TARGET_PROVIDERS[kind]:
        return None
    return _refusal(connection, Capability.CHAT if kind == RouteKind.CHAT else Capability.RERANK)


class RouteTarget(models.Model):
    """One connection a route may call, at ``position`` (0-based) in the route's order."""

    route = models.ForeignKey(Route, on_delete=models.CASCADE, related_name="targets")
    position = models.PositiveSmallIntegerField()
    # PROTECT: a connection a route depends on cannot disappear under it.
    connection = models.ForeignKey(ModelConnection, on_delete=models.PROTECT, related_name="route_targets")
    # Empty: the connection's own model.
    model_name = models.CharField(max_length=128, blank=True, default="")
    weight = models.PositiveIntegerField(default=1)
    # Seconds to the first byte of the answer; None: the connection's default timeout.
    first_byte_timeout = models.FloatField(null=True, blank=True)

    class Meta:
        db_table = "route_targets"
        ordering = ["route", "position"]
        constraints = [
            models.UniqueConstraint(fields=["route", "position"], name="route_targets_position"),
            models.CheckConstraint(condition=models.Q(weight__gte=1), name="route_targets_weight_positive"),
            models.CheckConstraint(
                condition=models.Q(first_byte_timeout__isnull=True) | models.Q(first_byte_timeout__gt=0),
                name="route_targets_timeout_positive",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.route.name}[{self.position}] {self.connection.name}"

    @property
    def effective_model_name(self) -> str:
        """The model this target asks its connection for."""
        return self.model_name or self.connection.model_name
