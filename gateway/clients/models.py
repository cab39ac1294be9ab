from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models

from gateway.connections.models import ModelConnection, Route
from stores.models import DB_CASCADE, Document, RagStore


class Scope(models.TextChoices):
    CHAT = "chat"
    RETRIEVE = "retrieve"
    RERANK = "rerank"
    MODELS = "models"
    # Files and vector stores (`/v1/files`, `/v1/vector_stores`): reading them (list, retrieve,
    # content, search) and writing them (upload, create, modify, attach, delete).
    FILES_READ = "files_read"
    FILES_WRITE = "files_write"


def all_scopes() -> list[str]:
    return list(Scope.values)


class SpendLimits(models.Model):
    """The rate limits and budgets of a project and of each of its keys; 0 is no limit.

    Windows are fixed UTC minutes, days and calendar months. Dollar budgets are integer
    micro-dollars (`ragmux.core.units`), compared with the calls' priced cost (`cost_micros`).
    """

    rate_limit_rpm = models.PositiveIntegerField(default=0)
    rate_limit_tpm = models.PositiveIntegerField(default=0)
    # `bigint`: a month of a busy project passes the 2.1 billion tokens of an `integer`.
    budget_daily_tokens = models.PositiveBigIntegerField(default=0)
    budget_monthly_tokens = models.PositiveBigIntegerField(default=0)
    budget_daily_usd_micros = models.PositiveBigIntegerField(default=0)
    budget_monthly_usd_micros = models.PositiveBigIntegerField(default=0)

    class Meta:
        abstract = True


LIMIT_FIELDS = (
    "rate_limit_rpm",
    "rate_limit_tpm",
    "budget_daily_tokens",
    "budget_monthly_tokens",
    "budget_daily_usd_micros",
    "budget_monthly_usd_micros",
)


class QueryRewrite(models.TextChoices):
    """How a chat's retrieval query is made from its conversation (docs/api.md, "Follow-up
    questions"): the last user message alone, that message with the earlier user turns it
    refers back to (`gateway.clients.followups`), or a standalone question the project's chat
    model condenses the conversation into (`gateway.clients.query_rewrite`)."""

    OFF = "off", "off: the last user message"
    LAST_TURNS = "last_turns", "last_turns: the last user turns, by a rule"
    LLM = "llm", "llm: a standalone question from the chat model"


class Project(SpendLimits):
    """What a gateway key may do: the chat model it talks to (a connection or a route), the other
    routes its keys may call by name, and the store it is grounded in."""

    name = models.CharField(max_length=100, unique=True)
    # PROTECT: a connection or route a project depends on cannot disappear under it. Exactly one
    # of the two answers the project's chat.
    chat_connection = models.ForeignKey(
        ModelConnection, on_delete=models.PROTECT, null=True, blank=True, related_name="chat_projects"
    )
    chat_route = models.ForeignKey(Route, on_delete=models.PROTECT, null=True, blank=True, related_name="chat_projects")
    allowed_routes = models.ManyToManyField(Route, blank=True, related_name="allowed_projects")
    embedding_connection = models.ForeignKey(
        ModelConnection, on_delete=models.PROTECT, null=True, blank=True, related_name="embedding_projects"
    )
    store = models.ForeignKey(RagStore, on_delete=models.SET_NULL, null=True, blank=True, related_name="projects")
    system_prompt = models.TextField(blank=True, default="")
    query_rewrite = models.CharField(max_length=16, choices=QueryRewrite.choices, default=QueryRewrite.OFF)
    # The chat connection that condenses follow-ups under `llm` (a small, cheap model, say); None:
    # the model the chat itself is answered by.
    query_rewrite_connection = models.ForeignKey(
        ModelConnection, on_delete=models.PROTECT, null=True, blank=True, related_name="query_rewrite_projects"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "projects"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(chat_connection__isnull=False, chat_route__isnull=True)
                | models.Q(chat_connection__isnull=True, chat_route__isnull=False),
                name="projects_one_chat_target",
            )
        ]

    def __str__(self) -> str:
        return self.name


class GatewayKey(SpendLimits):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="keys")
    name = models.CharField(max_length=100)
    # The first characters of the key, to recognise it; the key itself is only kept hashed.
    prefix = models.CharField(max_length=16)
    key_hash = models.CharField(max_length=64, unique=True)
    scopes = ArrayField(models.CharField(max_length=16, choices=Scope.choices), default=all_scopes)
    # The key's document scope: a search filter (retrieval/filters.py, in its wire shape) ANDed
    # with whatever filter a call sends, so the key reads only the documents passing it. None:
    # the whole store.
    filters = models.JSONField(null=True, blank=True, default=None)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    # Revoked keys stay so their request log rows keep pointing at them.
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "gateway_keys"
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class Endpoint(models.TextChoices):
    CHAT = "chat"
    RETRIEVE = "retrieve"
    EMBEDDINGS = "embeddings"
    RERANK = "rerank"
    MODELS = "models"
    RESPONSES = "responses"
    FILES = "files"
    VECTOR_STORES = "vector_stores"


# The endpoints whose calls may search the project's store, and those that spend tokens on a
# model (a call to any other, `/v1/models`, costs nothing and has no sources).
STORE_SEARCHING_ENDPOINTS = frozenset({Endpoint.CHAT, Endpoint.RESPONSES, Endpoint.RETRIEVE, Endpoint.VECTOR_STORES})
BILLED_ENDPOINTS = frozenset(
    {Endpoint.CHAT, Endpoint.RESPONSES, Endpoint.RETRIEVE, Endpoint.EMBEDDINGS, Endpoint.RERANK, Endpoint.VECTOR_STORES}
)


class RerankOutcome(models.TextChoices):
    RERANKED = "reranked"
    SKIPPED = "skipped"
    FALLBACK = "fallback"


# The longest reason a request log row keeps (an error, why retrieval was skipped).
REASON_MAX_LENGTH = 512


class RequestLog(models.Model):
    """One row per `/v1` call from key resolution on. Prompts and answers are never stored."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="request_logs")
    key = models.ForeignKey(GatewayKey, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    endpoint = models.CharField(max_length=16, choices=Endpoint.choices)
    # The connection's model (what was billed), not what the client wrote in `model`.
    model = models.CharField(max_length=128, blank=True, default="")
    status_code = models.PositiveSmallIntegerField()
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    embedding_tokens = models.PositiveIntegerField(default=0)
    # Tokens spent reranking (a `/v1/rerank` call, or the rerank inside a chat's or a retrieve's
    # search): the reranker's count, else estimated (then `tokens_estimated`).
    rerank_tokens = models.PositiveIntegerField(default=0)
    # Of the prompt tokens, those read from the provider's prompt cache and those written to it,
    # each priced at its own rate.
    cached_prompt_tokens = models.PositiveIntegerField(default=0)
    cache_write_tokens = models.PositiveIntegerField(default=0)
    tokens_estimated = models.BooleanField(default=False)
    cost_micros = models.BigIntegerField(default=0)
    cost_source = models.CharField(max_length=16, default="unpriced")
    latency_ms = models.PositiveIntegerField(default=0)
    ttfb_ms = models.PositiveIntegerField(null=True, blank=True)
    rag_hits = models.PositiveSmallIntegerField(default=0)
    # The passages a call was grounded on (document, file, section, page, score; never their text).
    sources = models.JSONField(default=list, blank=True)
    # Why a chat was answered without context although its project has a store (the store cannot
    # embed the query, the provider failed, the search timed out); empty otherwise.
    rag_skipped_reason = models.CharField(max_length=REASON_MAX_LENGTH, blank=True, default="")
    # What became of the call's rerank (its store's, or `/v1/rerank`'s): `reranked`, `skipped`
    # (nothing could rerank) or `fallback` (the reranker failed; the fused order stood), with why
    # for the last two; empty for a call that did not rerank.
    rerank_outcome = models.CharField(max_length=16, choices=RerankOutcome.choices, blank=True, default="")
    rerank_reason = models.CharField(max_length=REASON_MAX_LENGTH, blank=True, default="")
    # A chat of a project whose `query_rewrite` is `llm`: the tokens its condensation spent
    # (prompt and answer, priced in `cost_micros`), and why the condensation fell back to the
    # last user message (empty when it did not).
    query_rewrite_tokens = models.PositiveIntegerField(default=0)
    query_rewrite_reason = models.CharField(max_length=REASON_MAX_LENGTH, blank=True, default="")
    streamed = models.BooleanField(default=False)
    error = models.CharField(max_length=REASON_MAX_LENGTH, blank=True, default="")
    # A chat sent to a route: its name, the connection of the target that answered (or was tried
    # last), by name so the row still says it after the connection is gone, and every attempt
    # made, in order: {"target": <connection name>, "model", "outcome": "ok", "timeout",
    # "connect", "http_5xx", "http_429", ..., "ms"}. Empty for a chat of the project's connection.
    route_name = models.CharField(max_length=200, blank=True, default="")
    target = models.CharField(max_length=100, blank=True, default="")
    attempts = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "request_logs"
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["project", "created_at"], name="request_logs_project_time"),
            # The retention purge and the request log's time filters across projects.
            models.Index(fields=["created_at"], name="request_logs_time"),
        ]


class UsageCounter(models.Model):
    """What a project (tier ``project``) or a key (tier ``key``) spent in one fixed UTC window
    (a minute, a day, a calendar month), and what its calls in flight have reserved.

    Written only by `gateway.clients.usage`: a call reserves its estimated tokens and price (and
    its request) before its upstream call and settles to its true usage when it ends. No foreign
    key: a deleted project's or key's rows are left to the retention purge.
    """

    tier = models.CharField(max_length=8)
    owner_id = models.BigIntegerField()
    period = models.CharField(max_length=8)
    period_start = models.DateTimeField()
    requests = models.BigIntegerField(default=0)
    prompt_tokens = models.BigIntegerField(default=0)
    completion_tokens = models.BigIntegerField(default=0)
    cost_micros = models.BigIntegerField(default=0)
    reserved_tokens = models.BigIntegerField(default=0)
    reserved_micros = models.BigIntegerField(default=0)

    class Meta:
        db_table = "usage_counters"
        constraints = [
            models.UniqueConstraint(fields=["tier", "owner_id", "period", "period_start"], name="usage_counters_window")
        ]
        # The retention purge, by period and age.
        indexes = [models.Index(fields=["period", "period_start"], name="usage_counters_age")]


class StoredResponse(models.Model):
    """A `/v1/responses` answer kept (`store`, true unless the client says false) so a later call
    can continue it with `previous_response_id` and a key of its project can read it back.

    ``history`` is the conversation before this turn (the previous response's history, input
    and output items), so continuing costs one read; ``input_items`` are this turn's, as
    `GET .../input_items` lists them; ``response`` is the `response` object as answered.
    Purged with the request log after LOG_RETENTION_DAYS.
    """

    id = models.CharField(primary_key=True, max_length=64)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    key = models.ForeignKey(GatewayKey, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    history = models.JSONField(default=list)
    input_items = models.JSONField(default=list)
    response = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "stored_responses"
        indexes = [models.Index(fields=["created_at"], name="stored_responses_time")]


class FilePurpose(models.TextChoices):
    """The purposes of OpenAI's files we take: files a vector store (`file_search`) reads."""

    ASSISTANTS = "assistants"
    USER_DATA = "user_data"


class ClientFile(models.Model):
    """A file a key of the project uploaded (`POST /v1/files`), kept as given so it can be read
    back and attached to vector stores (each attachment stores a document of its own bytes)."""

    # `file-…`, opaque (gateway/clients/vector_store_ids.py).
    id = models.CharField(primary_key=True, max_length=64)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    filename = models.CharField(max_length=255)
    purpose = models.CharField(max_length=16, choices=FilePurpose.choices)
    content = models.BinaryField()
    size_bytes = models.PositiveBigIntegerField()
    content_sha256 = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "client_files"
        indexes = [models.Index(fields=["project", "created_at"], name="client_files_project_time")]


class VectorStore(models.Model):
    """A project's view of a RAG store as OpenAI's vector store (`vs_…`).

    ``owned``: the project created it over `/v1/vector_stores`, and the store is its own
    (created with the instance's defaults; deleting the vector store deletes the store). Not
    owned: the store an admin gave the project (`Project.store`), which appears to the project's
    keys as a vector store of its own row, made on first reach, which a key can rename and
    describe but never delete. A store reached by several projects has one row per project.
    """

    id = models.CharField(primary_key=True, max_length=64)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    store = models.ForeignKey(RagStore, on_delete=models.CASCADE, related_name="+")
    owned = models.BooleanField(default=True)
    # What the client named it (the store's own name is unique across the instance).
    name = models.CharField(max_length=256, blank=True, default="")
    metadata = models.JSONField(default=dict, blank=True)
    # OpenAI's `expires_after` ({"anchor": "last_active_at", "days": n}), kept and answered;
    # an expired vector store is reported `expired` and is not deleted by us.
    expires_after_days = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_active_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "vector_stores"
        constraints = [
            models.UniqueConstraint(fields=["project", "store"], name="vector_stores_one_per_project_store"),
            models.UniqueConstraint(
                fields=["store"], condition=models.Q(owned=True), name="vector_stores_one_owner_per_store"
            ),
        ]
        indexes = [models.Index(fields=["project", "created_at"], name="vector_stores_project_time")]


class VectorStoreFileBatch(models.Model):
    """Files attached to a vector store by one `file_batches` call (`vsfb_…`)."""

    id = models.CharField(primary_key=True, max_length=64)
    vector_store = models.ForeignKey(VectorStore, on_delete=models.CASCADE, related_name="batches")
    cancelled = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "vector_store_file_batches"


class VectorStoreFile(models.Model):
    """A file attached to a vector store: the document its bytes became in the store.

    Its status is the document's (gateway/clients/vector_store_shapes.py). A file admission
    refused (a duplicate of another document, a full quota) keeps no document and holds why in
    ``refusal_code``/``refusal_message``; a cancelled batch's files that had not started are
    ``cancelled`` and lose their document. Deleting the document (in the dashboard too) deletes
    this row.
    """

    vector_store = models.ForeignKey(VectorStore, on_delete=models.CASCADE, related_name="files")
    # The file's public id, kept after the file itself is deleted (as OpenAI keeps a vector
    # store's file): no database constraint.
    file = models.ForeignKey(ClientFile, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    # Gone with its document, by the database (ON DELETE CASCADE, added in the migration): a
    # document deleted in the dashboard, or with its store, takes its attachment with it.
    document = models.OneToOneField(Document, null=True, blank=True, related_name="+", **DB_CASCADE)
    batch = models.ForeignKey(
        VectorStoreFileBatch, on_delete=models.SET_NULL, null=True, blank=True, related_name="files"
    )
    refusal_code = models.CharField(max_length=32, blank=True, default="")
    refusal_message = models.CharField(max_length=REASON_MAX_LENGTH, blank=True, default="")
    cancelled = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "vector_store_files"
        constraints = [
            models.UniqueConstraint(fields=["vector_store", "file"], name="vector_store_files_once_per_store"),
        ]
        indexes = [models.Index(fields=["vector_store", "created_at"], name="vector_store_files_time")]
