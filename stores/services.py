"""Services that write RAG stores (their settings) and delete documents.

Documents enter a store, and go back to its queue, through ingestion's admission services.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.db import IntegrityError, transaction

from gateway.connections.models import RERANK_API_PROVIDERS, Capability, ModelConnection, RouteKind, why_cannot
from gateway.connections.probes import embedding_width
from gateway.connections.selectors import connection_named_by, route_named_by
from ragmux.core.audit import audit_change, snapshot
from ragmux.core.errors import Conflict, InvalidInput, UpstreamFailed
from ragmux.core.services import model_update
from ragmux.core.wakeups import send_on_commit
from stores import index, tasks
from stores.backends import backend_available, text_search_config_exists
from stores.choices import ChunkingStrategy, SearchBackend, UnknownStrategy
from stores.models import STORE_SETTINGS, Document, RagStore, store_defaults
from stores.selectors import embedding_connection_locked
from stores.vector_tables import MAX_INDEXED_DIMS

logger = logging.getLogger("ragmux.stores")

WIDTH_PROBE_TIMEOUT = 15.0
# Settings whose change alters the chunks, and so what is stored and embedded.
CHUNK_SHAPING_FIELDS = ("chunk_size", "chunk_overlap", "contextual_chunks", "chunking_strategy")
# The audit row of a change to a store; admission's bulk reprocess writes its row here too.
audit_store = partial(audit_change, object_type="store")
# What a document's row in the audit trail says of it (its error too, when it has one).
AUDITED_DOCUMENT_FIELDS = ("store_id", "filename", "size_bytes", "status")


# --------------------------------------------------------------------------------------------
# Stores
# --------------------------------------------------------------------------------------------


def _validate_store_values(values: dict[str, Any]) -> dict[str, Any]:
    """Checks the rules that span fields or need the database; returns normalised values."""
    embedding = connection_named_by(values["embedding_connection_id"], field="embedding_connection_id")
    if embedding is None:
        raise InvalidInput("embedding_connection_id is required", field="embedding_connection_id")
    refusal = why_cannot(embedding, Capability.EMBED)
    if refusal is not None:
        raise InvalidInput(refusal, field="embedding_connection_id")
    if values["chunk_overlap"] >= values["chunk_size"]:
        raise InvalidInput("chunk_overlap must be smaller than chunk_size", field="chunk_overlap")
    try:
        values["chunking_strategy"] = ChunkingStrategy.parse(values["chunking_strategy"])
    except UnknownStrategy as exc:
        raise InvalidInput(str(exc), field="chunking_strategy") from None
    backend = backend_available(values["search_backend"])
    if not backend.available:
        raise InvalidInput(f'search_backend "{backend.id}" is not available: {backend.reason}', field="search_backend")
    for name in ("fts_config", "index_config"):
        values[name] = values[name].strip().lower()
        if not text_search_config_exists(values[name]):
            raise InvalidInput(f'{name} "{values[name]}" is not a text search configuration on this server', field=name)
    _validate_rerank_target(values)
    return values


def _validate_rerank_target(values: dict[str, Any]) -> None:
    """A store reranks through a connection or a rerank route (never both), each connection of
    which must fit the backend; the API backends cannot rerank without one."""
    backend = values["rerank_backend"]
    connection = connection_named_by(values["rerank_connection_id"], field="rerank_connection_id")
    route = route_named_by(values["rerank_route_id"], field="rerank_route_id")
    if connection is not None and route is not None:
        raise InvalidInput("set rerank_connection_id or rerank_route_id, not both", field="rerank_route_id")
    if connection is None and route is None and values["rerank"] and backend in RERANK_API_PROVIDERS:
        raise InvalidInput(
            f"rerank_connection_id is required with the {backend} backend: "
            f"a {RERANK_API_PROVIDERS[backend]} connection (or rerank_route_id: a route of them)",
            field="rerank_connection_id",
        )
    if connection is not None:
        refusal = why_cannot(connection, Capability.RERANK, rerank_backend=backend)
        if refusal is not None:
            raise InvalidInput(refusal, field="rerank_connection_id")
    if route is not None:
        if route.kind != RouteKind.RERANK:
            raise InvalidInput(
                f"route {route.name!r} is a {route.kind} route, not a rerank route", field="rerank_route_id"
            )
        for target in route.targets.select_related("connection").order_by("position"):
            refusal = why_cannot(target.connection, Capability.RERANK, rerank_backend=backend)
            if refusal is not None:
                raise InvalidInput(f"route {route.name!r}: {refusal}", field="rerank_route_id")


def warn_about_fts_config(store: RagStore) -> None:
    if (
        store.search_backend == SearchBackend.PGVECTOR
        and store.fts_config != "simple"
        and store.index_config == "simple"
    ):
        logger.warning(
            "store %s (%s): fts_config %r parses queries differently from the `simple` index; "
            "stemmed or stop-worded queries can miss chunks (set index_config instead)",
            store.pk,
            store.name,
            store.fts_config,
        )


def _probe_width(connection_: ModelConnection) -> None:
    """Refuses a model wider than we can index; an unreachable model is checked at first ingest."""
    try:
        width = embedding_width(connection_, timeout=WIDTH_PROBE_TIMEOUT)
    except UpstreamFailed as exc:
        logger.warning("width probe of connection %s failed, checking at first ingest: %s", connection_.name, exc)
        return
    if width > MAX_INDEXED_DIMS:
        raise InvalidInput(
            f"the embedding model returns {width} dimensions; ragmux indexes at most {MAX_INDEXED_DIMS} "
            f"(choose a model, or a dimensions setting, of {MAX_INDEXED_DIMS} or fewer)",
            field="embedding_connection_id",
        )


def _settings(store: RagStore) -> dict[str, Any]:
    return snapshot(store, ("name", *STORE_SETTINGS))


def store_create(*, name: str, values: dict[str, Any], actor=None) -> RagStore:
    values = _validate_store_values({**store_defaults(), **values})
    if RagStore.objects.filter(name=name).exists():
        raise Conflict(f"a store named {name!r} already exists", code="duplicate_name")
    _probe_width(ModelConnection.objects.get(pk=values["embedding_connection_id"]))
    try:
        with transaction.atomic():
            store, _ = model_update(instance=RagStore(name=name), fields=values, data=values, save=False)
            # Nothing is indexed yet: the index starts out in the chosen configuration.
            store.indexed_config = store.index_config
            store.save()
            audit_store(store, actor=actor, action="store.create", after=_settings(store))
    except IntegrityError:
        raise Conflict(f"a store named {name!r} already exists", code="duplicate_name") from None
    warn_about_fts_config(store)
    return store


@dataclass
class StoreUpdate:
    store: RagStore
    reprocess_recommended: bool


def store_update(*, store: RagStore, name: str, values: dict[str, Any], actor=None) -> StoreUpdate:
    current = {field_name: getattr(store, field_name) for field_name in STORE_SETTINGS}
    merged = _validate_store_values({**current, **values})
    if RagStore.objects.filter(name=name).exclude(pk=store.pk).exists():
        raise Conflict(f"a store named {name!r} already exists", code="duplicate_name")
    connection_changed = merged["embedding_connection_id"] != store.embedding_connection_id
    if connection_changed:
        if embedding_connection_locked(store):
            raise Conflict(
                "the embedding connection is fixed once the store holds chunks; create a new store instead",
                code="embedding_connection_locked",
            )
        _probe_width(ModelConnection.objects.get(pk=merged["embedding_connection_id"]))
    shaping_changed = any(merged[f] != current[f] for f in CHUNK_SHAPING_FIELDS)
    with transaction.atomic():
        # NO KEY: a rebuild or an ingest holds a key-share lock on the row (its postings reference
        # it) for as long as it writes; a settings change must not wait for them.
        locked = RagStore.objects.select_for_update(no_key=True).get(pk=store.pk)
        before = _settings(locked)
        model_update(instance=locked, fields=("name", *merged), data={"name": name, **merged})
        audit_store(locked, actor=actor, action="store.update", before=before, after=_settings(locked))
        has_documents = Document.objects.filter(store=locked).exists()
        if locked.index_config != locked.indexed_config:
            send_on_commit(tasks.rebuild_lexical_index, locked.pk)
    warn_about_fts_config(locked)
    return StoreUpdate(store=locked, reprocess_recommended=shaping_changed and has_documents)


@transaction.atomic
def store_delete(*, store: RagStore, actor=None) -> None:
    # Documents, chunks, vectors and term statistics go with it (ON DELETE CASCADE).
    RagStore.objects.filter(pk=store.pk).delete()
    audit_store(store, actor=actor, action="store.delete", before=_settings(store))


# --------------------------------------------------------------------------------------------
# Documents
# --------------------------------------------------------------------------------------------


def document_snapshot(document: Document) -> dict[str, Any]:
    values = snapshot(document, AUDITED_DOCUMENT_FIELDS)
    return {**values, "error": document.error} if document.error else values


def audit_document(document: Document, *, actor, action: str, before=None, after=None) -> None:
    """The audit row of an action on one document; admission's services write theirs here too."""
    audit_change(document, object_type="document", actor=actor, action=action, before=before, after=after)


def document_delete(*, document: Document, actor=None) -> None:
    """Deletes a document with its chunks, vectors and term statistics.

    A worker still processing it finds its claim gone at the next lease check and stops
    without writing anything.
    """
    with transaction.atomic():
        index.lock_store_for_writing(document.store_id)
        # The document's row next, as ingestion's claim takes it: a commit of its chunks in
        # flight ends first, and its chunks are then counted out here.
        Document.objects.select_for_update().filter(pk=document.pk).first()
        index.remove_document(store_id=document.store_id, document_id=document.pk)
        Document.objects.filter(pk=document.pk).delete()
        audit_document(document, actor=actor, action="document.delete", before=document_snapshot(document))


# What of a document can be edited after its upload (its metadata: searches filter on them).
EDITABLE_DOCUMENT_FIELDS = ("attributes", "tags")


def document_update(*, document: Document, values: dict[str, Any], actor=None) -> Document:
    """Replaces the given metadata of a document (each field whole), with an audit row of the
    values before and after. The chunks need no change: a search reads the document's row."""
    with transaction.atomic():
        locked = Document.objects.select_for_update().defer("original").get(pk=document.pk)
        before = snapshot(locked, EDITABLE_DOCUMENT_FIELDS)
        for name in EDITABLE_DOCUMENT_FIELDS:
            if name in values:
                setattr(locked, name, values[name])
        locked.save(update_fields=[*values, "updated_at"])
        audit_document(
            locked,
            actor=actor,
            action="document.update",
            before=before,
            after=snapshot(locked, EDITABLE_DOCUMENT_FIELDS),
        )
    return locked
