"""Reads of stores and documents."""

from __future__ import annotations

from django.conf import settings
from django.db.models import Count, Q, QuerySet, Sum
from django.db.models.functions import Coalesce

from ragmux.core.errors import NotFound
from ragmux.core.units import MIB
from stores.models import Document, DocumentStatus, RagStore
from stores.quotas import Limits, Usage, effective_limit

DOCUMENT_LIST_FIELDS = (
    "id",
    "store_id",
    "filename",
    "title",
    "mime",
    "source",
    "tags",
    "attributes",
    "size_bytes",
    "content_sha256",
    "status",
    "progress_percent",
    "error",
    "error_stage",
    "page_count",
    "chunk_count",
    "warnings",
    "ocr_pages",
    "attempts",
    "created_at",
    "updated_at",
)


def store_list() -> QuerySet[RagStore]:
    return (
        RagStore.objects.select_related("embedding_connection", "rerank_connection")
        .annotate(
            document_count=Count("documents"),
            bytes_used=Coalesce(Sum("documents__size_bytes"), 0),
            chunk_count=Coalesce(Sum("documents__chunk_count", filter=Q(documents__status="ready")), 0),
        )
        .order_by("id")
    )


def embedding_connection_locked(store: RagStore) -> bool:
    """True once the store holds vectors: its embedding connection can no longer change (the
    vectors' width and meaning are that model's)."""
    return store.dimensions is not None or Document.objects.filter(store=store, chunk_count__gt=0).exists()


def store_get(store_id: int) -> RagStore:
    """The store with its usage counts; NotFound when there is none."""
    store = store_list().filter(pk=store_id).first()
    if store is None:
        raise NotFound.of("store")
    return store


def store_usage(store: RagStore) -> Usage:
    totals = Document.objects.filter(store=store).aggregate(n=Count("id"), size=Sum("size_bytes"))
    return Usage(documents=totals["n"], bytes=totals["size"] or 0)


def listed_usage(store: RagStore) -> Usage:
    """The usage of a store read by store_list or store_get, from its annotations: a page
    listing many stores' quotas then costs no query per store."""
    return Usage(documents=store.document_count, bytes=store.bytes_used)


def store_limits(store: RagStore) -> Limits:
    return Limits(
        documents=effective_limit(store.max_documents, settings.MAX_DOCUMENTS_PER_STORE),
        bytes=effective_limit(store.max_bytes, settings.MAX_BYTES_PER_STORE_MB * MIB),
    )


def document_list(*, store: RagStore, status: str | None = None) -> QuerySet[Document]:
    """Newest first; the original bytes stay in the database."""
    documents = Document.objects.filter(store=store).only(*DOCUMENT_LIST_FIELDS).order_by("-id")
    if status:
        documents = documents.filter(status=status)
    return documents


def document_get(document_id: int) -> Document:
    """The document without its original bytes; NotFound when there is none."""
    document = Document.objects.filter(pk=document_id).only(*DOCUMENT_LIST_FIELDS).first()
    if document is None:
        raise NotFound.of("document")
    return document


def document_original(document_id: int) -> Document:
    """The document with its original bytes, for download."""
    document = Document.objects.filter(pk=document_id).only("filename", "mime", "original").first()
    if document is None:
        raise NotFound.of("document")
    return document


def stores_searching_with(*, backend: str) -> int:
    """How many stores are configured to search with ``backend``."""
    return RagStore.objects.filter(search_backend=backend).count()


def documents_by_status(*, store: RagStore | None = None) -> dict[str, int]:
    """Document counts per status, across stores or in one."""
    documents = Document.objects.filter(store=store) if store is not None else Document.objects.all()
    return dict(documents.order_by().values_list("status").annotate(n=Count("id")).values_list("status", "n"))


def recent_failures(*, limit: int) -> QuerySet[Document]:
    """The failed documents most recently changed, across stores, with their store's name."""
    return (
        Document.objects.filter(status=DocumentStatus.FAILED)
        .select_related("store")
        .only(*DOCUMENT_LIST_FIELDS, "store__name")
        .order_by("-updated_at", "-id")[:limit]
    )
