from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models

from gateway.connections.models import ModelConnection, Route, RouteKind
from stores.choices import (
    DEFAULT_FUSION,
    SECTION_MAX_LENGTH,
    ChunkingStrategy,
    DocumentStatus,
    ErrorStage,
    FusionRule,
    RerankBackend,
    SearchBackend,
    SearchMode,
)


def default_index_config() -> str:
    """New stores' index language: the deployment's DEFAULT_INDEX_CONFIG (english unless set)."""
    return settings.DEFAULT_INDEX_CONFIG


def default_fusion_weights() -> dict:
    return {"vector": 1.0, "lexical": 1.0}


class RagStore(models.Model):
    name = models.CharField(max_length=100, unique=True)
    embedding_connection = models.ForeignKey(ModelConnection, on_delete=models.PROTECT, related_name="embedding_stores")
    chunk_size = models.PositiveIntegerField(default=1000)
    chunk_overlap = models.PositiveIntegerField(default=200)
    chunking_strategy = models.CharField(
        max_length=16, choices=ChunkingStrategy.choices, default=ChunkingStrategy.SECTION
    )
    contextual_chunks = models.BooleanField(default=True)
    top_k = models.PositiveIntegerField(default=5)
    search_mode = models.CharField(max_length=16, choices=SearchMode.choices, default=SearchMode.HYBRID)
    search_backend = models.CharField(max_length=16, choices=SearchBackend.choices, default=SearchBackend.BM25)
    fts_config = models.CharField(max_length=63, default="simple")
    # The text search configuration of everything lexical the store owns (chunk tsvectors, BM25
    # postings and statistics, the typo vocabulary, query parsing). Changing it rebuilds the
    # lexical index in the background (stores/rebuild.py).
    index_config = models.CharField(max_length=63, default=default_index_config)
    # The configuration the live lexical index was built with: index_config once a rebuild has
    # finished. Empty for an index built before punctuation split words (stores/lexical.py),
    # which the rebuild sweep brings up to date.
    indexed_config = models.CharField(max_length=63, default=default_index_config, blank=True)
    fusion_weights = models.JSONField(default=default_fusion_weights)
    fusion = models.CharField(max_length=16, choices=FusionRule.choices, default=DEFAULT_FUSION)
    typo_tolerance = models.BooleanField(default=False)
    rerank = models.BooleanField(default=False)
    rerank_backend = models.CharField(max_length=16, choices=RerankBackend.choices, default=RerankBackend.LLM)
    rerank_connection = models.ForeignKey(
        ModelConnection, on_delete=models.SET_NULL, null=True, blank=True, related_name="rerank_stores"
    )
    # Or a rerank route, whose targets are tried in order (never both: stores/services.py).
    rerank_route = models.ForeignKey(
        Route,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="rerank_stores",
        limit_choices_to={"kind": RouteKind.RERANK},
    )
    rerank_candidates = models.PositiveIntegerField(default=15)
    max_distance = models.FloatField(default=0.0)
    max_documents = models.PositiveIntegerField(default=0)
    max_bytes = models.PositiveBigIntegerField(default=0)
    # Scanned PDF pages and images are read by OCR (ingestion.parsing.ocr), in this Tesseract
    # language (codes joined by "+" for several).
    ocr = models.BooleanField(default=True)
    ocr_language = models.CharField(max_length=63, default="eng")
    # Width of the store's vectors, recorded by the first ingest.
    dimensions = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "rag_stores"
        ordering = ["id"]

    def __str__(self) -> str:
        return self.name

    @property
    def query_config(self) -> str:
        """The configuration queries are parsed with under the bm25 backend: the live index's."""
        return self.indexed_config or "simple"


# A store's settings, as the API and the dashboard name them.
STORE_SETTINGS = (
    "embedding_connection_id",
    "chunk_size",
    "chunk_overlap",
    "chunking_strategy",
    "contextual_chunks",
    "top_k",
    "search_mode",
    "search_backend",
    "fts_config",
    "index_config",
    "fusion_weights",
    "fusion",
    "typo_tolerance",
    "rerank",
    "rerank_backend",
    "rerank_connection_id",
    "rerank_route_id",
    "rerank_candidates",
    "max_distance",
    "max_documents",
    "max_bytes",
    "ocr",
    "ocr_language",
)


def store_defaults() -> dict:
    """Every setting that has a default, from the model's fields (the one place they are written)."""
    fields = {name: RagStore._meta.get_field(name.removesuffix("_id")) for name in STORE_SETTINGS}
    return {name: field.get_default() for name, field in fields.items() if field.has_default() or field.null}


# Rows below a store are removed by the database (ON DELETE CASCADE constraints added in the
# migrations), not by Django's collector, which would load every chunk of a large store into
# memory just to delete it.
DB_CASCADE = {"on_delete": models.DO_NOTHING, "db_constraint": False}


class Document(models.Model):
    store = models.ForeignKey(RagStore, related_name="documents", **DB_CASCADE)
    filename = models.CharField(max_length=255)
    title = models.CharField(max_length=512, blank=True, default="")
    mime = models.CharField(max_length=127, blank=True, default="")
    source = models.CharField(max_length=2048, blank=True, default="")
    tags = ArrayField(models.CharField(max_length=128), default=list, blank=True)
    # What searches filter on besides the tags (stores/attributes.py holds the rules).
    attributes = models.JSONField(default=dict, blank=True)
    original = models.BinaryField()
    size_bytes = models.PositiveBigIntegerField()
    content_sha256 = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=DocumentStatus.choices, default=DocumentStatus.PENDING)
    progress_percent = models.PositiveSmallIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    error_stage = models.CharField(max_length=16, choices=ErrorStage.choices, blank=True, default="")
    page_count = models.PositiveIntegerField(null=True, blank=True)
    chunk_count = models.PositiveIntegerField(default=0)
    # What the parser left out of a document it could read ("page 4 was skipped: …"), and how
    # many of its pages were read by OCR.
    warnings = ArrayField(models.TextField(), default=list, blank=True)
    ocr_pages = models.PositiveIntegerField(default=0)
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
            # Empty files hold nothing to duplicate: each is kept, and fails as empty.
            models.UniqueConstraint(
                fields=["store", "content_sha256"],
                condition=models.Q(size_bytes__gt=0),
                name="documents_unique_bytes_per_store",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "id"], name="documents_queue"),
            models.Index(fields=["status", "lease_expires_at"], name="documents_leases"),
            # A search's filter is compiled to containment tests (`@>`, retrieval/filters.py),
            # which these answer without reading every document of the store.
            GinIndex(fields=["attributes"], opclasses=["jsonb_path_ops"], name="documents_attributes"),
            GinIndex(fields=["tags"], name="documents_tags"),
        ]

    def __str__(self) -> str:
        return self.filename


class Chunk(models.Model):
    store = models.ForeignKey(RagStore, related_name="+", **DB_CASCADE)
    document = models.ForeignKey(Document, related_name="chunks", **DB_CASCADE)
    index = models.PositiveIntegerField()
    content = models.TextField()
    section = models.CharField(max_length=SECTION_MAX_LENGTH, blank=True, default="")
    page = models.PositiveIntegerField(null=True, blank=True)
    # SHA-256 of the whitespace-normalised text that was embedded (for vector reuse).
    embedded_hash = models.CharField(max_length=64)
    # Number of lexeme positions in the tsvector: the BM25 document length.
    token_count = models.PositiveIntegerField(default=0)
    # Written by the index writer (stores/index.py) with the store's indexed_config; a chunk
    # written without one is invisible to lexical search.
    tsv = SearchVectorField(null=True)

    class Meta:
        db_table = "chunks"
        ordering = ["document_id", "index"]
        constraints = [models.UniqueConstraint(fields=["document", "index"], name="chunks_document_index")]
        indexes = [GinIndex(fields=["tsv"], name="chunks_tsv_gin")]


class ChunkTerm(models.Model):
    """One lexeme of a chunk's tsvector: a BM25 posting.

    The chunk's length is copied in so scoring reads nothing but this table's index.
    """

    # The two indexes (migration 0008): this key, which also covers tf and length for exact
    # rescoring, and `chunk_terms_by_density` (store_id, term, density, chunk_id) for reading a
    # term's postings. Postings go with their chunk (a cascading constraint on chunk_id only).
    pk = models.CompositePrimaryKey("chunk_id", "term")
    chunk = models.ForeignKey(Chunk, related_name="+", db_index=False, **DB_CASCADE)
    store = models.ForeignKey(RagStore, related_name="+", db_index=False, **DB_CASCADE)
    term = models.TextField()
    tf = models.PositiveIntegerField()
    chunk_length = models.PositiveIntegerField()

    class Meta:
        db_table = "chunk_terms"


class StoreTerm(models.Model):
    """A store's vocabulary with document frequencies (BM25 idf, typo correction)."""

    pk = models.CompositePrimaryKey("store_id", "term")
    store = models.ForeignKey(RagStore, related_name="+", db_index=False, **DB_CASCADE)
    term = models.TextField()
    df = models.PositiveIntegerField()

    class Meta:
        db_table = "store_terms"


class StoreTextStats(models.Model):
    """Chunk count and summed lengths of a store, for BM25's average length."""

    store = models.OneToOneField(RagStore, primary_key=True, related_name="+", **DB_CASCADE)
    chunk_count = models.BigIntegerField(default=0)
    token_total = models.BigIntegerField(default=0)

    class Meta:
        db_table = "store_text_stats"
