"""Reads of stores and documents."""

from __future__ import annotations

from django.db.models import Count, Q, QuerySet, Sum
from django.db.models.functions import Coalesce

from ragmux.errors import NotFound
from stores.models import Document, RagStore

DOCUMENT_LIST_FIELDS = (
    "id",
    "store_id",
    "filename",
    "title",
    "mime",
    "source",
    "tags",
    "size_bytes",
    "content_sha256",
    "status",
    "progress_percent",
    "error",
    "page_count",
    "chunk_count",
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


def store_get(store_id: int) -> RagStore | None:
    return store_list().filter(pk=store_id).first()


def document_list(*, store: RagStore, status: str | None = None) -> QuerySet[Document]:
    """Newest first; the original bytes stay in the database."""
    documents = Document.objects.filter(store=store).only(*DOCUMENT_LIST_FIELDS).order_by("-id")
    if status:
        documents = documents.filter(status=status)
    return documents


def document_get(document_id: int) -> Document | None:
    return Document.objects.filter(pk=document_id).only(*DOCUMENT_LIST_FIELDS).first()


def documents_by_status() -> dict[str, int]:
    return dict(Document.objects.values_list("status").annotate(n=Count("id")).values_list("status", "n"))


def get_store(store_id: int) -> RagStore:
    """The store with its usage counts, or a 404 for the API."""
    store = store_get(store_id)
    if store is None:
        raise NotFound("store not found")
    return store


def get_document(document_id: int) -> Document:
    document = document_get(document_id)
    if document is None:
        raise NotFound("document not found")
    return document
