from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models

from gateway.models import ModelConnection


class SearchMode(models.TextChoices):
    VECTOR = "vector"
    HYBRID = "hybrid"
    LEXICAL = "lexical"


class SearchBackend(models.TextChoices):
    PGVECTOR = "pgvector"
    BM25 = "bm25"
    PG_SEARCH = "pg_search"


class RerankBackend(models.TextChoices):
    LLM = "llm"
    COHERE = "cohere"
    VOYAGE = "voyage"


class ChunkingStrategy(models.TextChoices):
    SECTION = "section"
    WORD = "word"
    SEMANTIC = "semantic"
    CHARACTER = "character"


def default_fusion_weights() -> dict:
    return {"vector": 1.0, "lexical": 1.0}


class RagStore(models.Model):
    name = models.CharField(max_length=100, unique=True)
    embedding_connection = models.ForeignKey(
        ModelConnection, on_delete=models.PROTECT, related_name="embedding_stores"
    )
    chunk_size = models.PositiveIntegerField(default=1000)
    chunk_overlap = models.PositiveIntegerField(default=200)
    chunking_strategy = models.CharField(max_length=16, choices=ChunkingStrategy.choices, default="section")
    contextual_chunks = models.BooleanField(default=True)
    top_k = models.PositiveIntegerField(default=5)
    search_mode = models.CharField(max_length=16, choices=SearchMode.choices, default="hybrid")
    search_backend = models.CharField(max_length=16, choices=SearchBackend.choices, default="bm25")
    fts_config = models.CharField(max_length=63, default="simple")
    fusion_weights = models.JSONField(default=default_fusion_weights)
    typo_tolerance = models.BooleanField(default=False)
    rerank = models.BooleanField(default=False)
    rerank_backend = models.CharField(max_length=16, choices=RerankBackend.choices, default="llm")
    rerank_connection = models.ForeignKey(
        ModelConnection, on_delete=models.SET_NULL, null=True, blank=True, related_name="rerank_stores"
    )
    rerank_candidates = models.PositiveIntegerField(default=15)
    max_distance = models.FloatField(default=0.0)
    max_documents = models.PositiveIntegerField(default=0)
    max_bytes = models.PositiveBigIntegerField(default=0)
    # Width of the store's vectors, recorded by the first ingest.
    dimensions = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "rag_stores"
        ordering = ["id"]

    def __str__(self) -> str:
        return self.name


class DocumentStatus(models.TextChoices):
    PENDING = "pending"
    PROCESSING = "processing"
    READY = "ready"
    FAILED = "failed"


class Document(models.Model):
    store = models.ForeignKey(RagStore, on_delete=models.CASCADE, related_name="documents")
    filename = models.CharField(max_length=255)
    title = models.CharField(max_length=512, blank=True, default="")
    mime = models.CharField(max_length=127, blank=True, default="")
    source = models.CharField(max_length=2048, blank=True, default="")
    tags = ArrayField(models.CharField(max_length=128), default=list, blank=True)
    original = models.BinaryField()
    size_bytes = models.PositiveBigIntegerField()
    content_sha256 = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=DocumentStatus.choices, default="pending")
    progress_percent = models.PositiveSmallIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    page_count = models.PositiveIntegerField(null=True, blank=True)
    chunk_count = models.PositiveIntegerField(default=0)
    # The queue: claims, their fencing token and lease, and how often a claim was made.
    attempts = models.PositiveIntegerField(default=0)
    lease_owner = models.CharField(max_length=128, blank=True, default="")
    lease_token = models.BigIntegerField(default=0)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "documents"
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(fields=["store", "content_sha256"], name="documents_unique_bytes_per_store"),
        ]
        indexes = [
            models.Index(fields=["status", "id"], name="documents_queue"),
            models.Index(fields=["status", "lease_expires_at"], name="documents_leases"),
        ]

    def __str__(self) -> str:
        return self.filename


class Chunk(models.Model):
    store = models.ForeignKey(RagStore, on_delete=models.CASCADE, related_name="+")
    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks")
    index = models.PositiveIntegerField()
    content = models.TextField()
    section = models.CharField(max_length=1024, blank=True, default="")
    page = models.PositiveIntegerField(null=True, blank=True)
    # SHA-256 of the whitespace-normalised text that was embedded (for vector reuse).
    embedded_hash = models.CharField(max_length=64)
    # Number of lexeme positions in the `simple` tsvector: the BM25 document length.
    token_count = models.PositiveIntegerField(default=0)
    tsv = models.GeneratedField(
        expression=SearchVector("content", config="simple"),
        output_field=SearchVectorField(),
        db_persist=True,
    )

    class Meta:
        db_table = "chunks"
        ordering = ["document_id", "index"]
        constraints = [models.UniqueConstraint(fields=["document", "index"], name="chunks_document_index")]
        indexes = [GinIndex(fields=["tsv"], name="chunks_tsv_gin")]
