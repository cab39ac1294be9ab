"""Rebuilding a store's lexical index after its ``index_config`` changed: new tsvectors, BM25
postings and term statistics from the stored chunk contents. Nothing is parsed or embedded
again; chunk ids, contents and vectors stay as they are.

The whole rebuild is one transaction, so every search sees the old index, complete, until the
new one is committed, and a worker killed mid-way leaves the old index in place (the sweep
starts the rebuild again). It holds the store's index lock alone: it waits for the documents
being written, and a document finishing ingestion meanwhile waits for the switch and is then
indexed with the new configuration. A change of ``index_config`` during a rebuild is noticed
between batches: the rebuild rolls back and starts over with the newer configuration.

Progress lives in Redis (every web process reads it); the configurations themselves live in
the store row, so the state survives any process.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

from django.db import connection, transaction
from django.db.models import F
from redis import RedisError

from ragmux.core.redis import shared_redis
from stores import index
from stores.models import RagStore

logger = logging.getLogger("ragmux.stores")

# Chunks retokenised per statement: large enough that per-statement costs vanish, small enough
# that a superseding change is noticed within a fraction of a second.
REBUILD_BATCH = 2000
_PROGRESS_TTL = 24 * 3600


def _progress_key(store_id: int) -> str:
    return f"ragmux:lexical-rebuild:{store_id}"


class _Superseded(Exception):
    """index_config changed (or the store went) while the rebuild ran."""


@dataclass(frozen=True)
class LexicalIndexState:
    """What the store's API and dashboard show about its lexical index."""

    config: str  # what the live index is built with ("" before punctuation split words)
    target_config: str
    state: str  # "ready" or "rebuilding"
    chunks_done: int | None
    chunks_total: int | None

    def as_dict(self) -> dict:
        return {
            "config": self.config,
            "target_config": self.target_config,
            "state": self.state,
            "chunks_done": self.chunks_done,
            "chunks_total": self.chunks_total,
        }


def lexical_index_state(store: RagStore) -> LexicalIndexState:
    if store.indexed_config == store.index_config:
        return LexicalIndexState(store.indexed_config, store.index_config, "ready", None, None)
    progress = _read_progress(store.pk)
    if progress is None or progress.get("config") != store.index_config:
        progress = {}
    return LexicalIndexState(
        store.indexed_config, store.index_config, "rebuilding", progress.get("done"), progress.get("total")
    )


def _read_progress(store_id: int) -> dict | None:
    try:
        raw = shared_redis().get(_progress_key(store_id))
    except RedisError:
        return None  # the state still shows "rebuilding", without a count
    return json.loads(raw) if raw else None


def _write_progress(store_id: int, config: str, done: int, total: int) -> None:
    """Progress is for display only: a Redis outage must not fail the rebuild."""
    try:
        shared_redis().set(
            _progress_key(store_id),
            json.dumps({"config": config, "done": done, "total": total, "at": time.time()}),
            ex=_PROGRESS_TTL,
        )
    except RedisError as exc:
        logger.warning("store %s: lexical rebuild progress not recorded: %s", store_id, exc)


def _wanted_config(store_id: int) -> str | None:
    """The store's index_config as last committed (each statement sees the latest commit)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT index_config FROM rag_stores WHERE id = %s", [store_id])
        row = cursor.fetchone()
    return row[0] if row else None


def _take_rebuild_lock(store_id: int) -> bool:
    """One rebuild per store at a time; the lock ends with the rebuild's transaction."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))", [_progress_key(store_id)])
        return cursor.fetchone()[0]


def lexical_index_rebuild(*, store_id: int) -> str:
    """Brings the store's lexical index to its index_config. Returns what happened: "rebuilt",
    "current" (nothing to do), "busy" (another rebuild of the store is running and will pick up
    the latest configuration) or "gone" (the store was deleted)."""
    rebuilt = False
    while True:
        try:
            outcome = _rebuild_once(store_id)
        except _Superseded:
            logger.info("store %s: index_config changed during the lexical rebuild; starting over", store_id)
            continue
        if outcome != "rebuilt":
            return "rebuilt" if rebuilt and outcome == "current" else outcome
        # A change committed just after the last check would otherwise wait for the sweep.
        rebuilt = True


def _rebuild_once(store_id: int) -> str:
    with transaction.atomic():
        if not _take_rebuild_lock(store_id):
            return "busy"
        config = _wanted_config(store_id)
        if config is None:
            return "gone"
        if RagStore.objects.filter(pk=store_id, indexed_config=config).exists():
            return "current"
        started = time.monotonic()
        index.lock_store_for_rebuild(store_id)
        chunk_ids = index.store_chunk_ids(store_id)
        _write_progress(store_id, config, 0, len(chunk_ids))
        for start in range(0, len(chunk_ids), REBUILD_BATCH):
            if _wanted_config(store_id) != config:
                raise _Superseded
            batch = chunk_ids[start : start + REBUILD_BATCH]
            index.retokenise_chunks(config=config, chunk_ids=batch)
            _write_progress(store_id, config, start + len(batch), len(chunk_ids))
        if _wanted_config(store_id) != config:
            raise _Superseded
        index.recount_statistics(store_id=store_id)
        index.switch_indexed_config(store_id=store_id, config=config)
    _clear_progress(store_id)
    elapsed = time.monotonic() - started
    logger.info(
        "store %s: lexical index rebuilt with %s: %d chunks in %.1fs", store_id, config, len(chunk_ids), elapsed
    )
    return "rebuilt"


def _clear_progress(store_id: int) -> None:
    try:
        shared_redis().delete(_progress_key(store_id))
    except RedisError:
        pass  # expires on its own; a finished rebuild reads as ready whatever it says


def stores_needing_rebuild() -> list[int]:
    return list(RagStore.objects.exclude(indexed_config=F("index_config")).values_list("pk", flat=True))
