"""A filtered search's candidates: each side of the search (vector, bm25) restricted to the
chunks of the documents that pass the filter BEFORE its limit is cut, so a filter never returns
fewer hits than exist.

Two paths per side, chosen by how many chunks pass (the documents' recorded chunk counts, read
through their GIN indexes):

- selective (few chunks pass): the passing chunks are scored exactly, and only they — a vector
  distance each, or a BM25 rescoring each (a probe per query term);
- broad: the unfiltered side is asked for more candidates than the limit (in proportion to the
  share that passes), the ones that do not pass are dropped, and when too few are left while
  more candidates existed, the exact path answers instead.

Full text (`pgvector` backend) and `pg_search` take the condition in their own statement: they
rank every matching chunk before their limit anyway.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings

from retrieval import bm25, sql
from retrieval.filters import Filter, filter_sql

if TYPE_CHECKING:
    from collections.abc import Callable

    from stores.models import RagStore

# At most this many passing chunks are BM25-scored one by one (a probe per query term each);
# beyond, the bounded BM25 pass runs unfiltered over more candidates and the passing ones are kept.
BM25_EXACT_MAX_CHUNKS = 5000
# The broad path asks for this many times the candidates the passing share needs...
OVERFETCH = 2
# ...and never for more than this many (then the exact path answers when too few pass).
OVERFETCH_MAX = 2000


@dataclass(frozen=True)
class StoreFilter:
    """A filter compiled for one store's search, with how many of its chunks pass."""

    filter: Filter
    condition: sql.DocumentCondition
    passing_chunks: int
    store_chunks: int

    @classmethod
    def of(cls, store: RagStore, node: Filter) -> StoreFilter:
        condition = sql.DocumentCondition(*filter_sql(node))
        passing_chunks, store_chunks = sql.passing_chunk_count(store_id=store.pk, passing=condition)
        return cls(filter=node, condition=condition, passing_chunks=passing_chunks, store_chunks=store_chunks)

    def overfetch(self, limit: int) -> int:
        """Candidates to ask an unfiltered side for, so that about ``limit`` of them pass."""
        share = self.passing_chunks / max(self.store_chunks, self.passing_chunks, 1)
        return min(max(limit, math.ceil(OVERFETCH * limit / max(share, 1e-9))), max(OVERFETCH_MAX, limit))


def _overfetched(
    store: RagStore, scope: StoreFilter, limit: int, unfiltered: Callable[[int], list[tuple[int, float]]]
) -> tuple[list[tuple[int, float]], bool]:
    """The broad path: the passing rows of a larger unfiltered list, in its order, at most
    ``limit``; and whether the list was cut (it held as many rows as were asked for)."""
    asked = scope.overfetch(limit)
    rows = unfiltered(asked)
    passing = sql.passing_chunks(
        store_id=store.pk, chunk_ids=[chunk_id for chunk_id, _ in rows], passing=scope.condition
    )
    return [row for row in rows if row[0] in passing][:limit], len(rows) >= asked


def vector_candidates(
    store: RagStore,
    scope: StoreFilter,
    limit: int,
    unfiltered: Callable[[int], list[tuple[int, float]]],
    query_vector: str,
) -> list[tuple[int, float]]:
    """The vector side under a filter: exact over the passing chunks when they number at most
    VECTOR_EXACT_SCAN_MAX_CHUNKS (as a small store is searched), else the HNSW side overfetched."""

    def exact() -> list[tuple[int, float]]:
        return sql.passing_vector_candidates(
            store_id=store.pk, width=store.dimensions, query_vector=query_vector, limit=limit, passing=scope.condition
        )

    if scope.passing_chunks <= settings.VECTOR_EXACT_SCAN_MAX_CHUNKS:
        return exact()
    kept, _ = _overfetched(store, scope, limit, unfiltered)
    # Every passing chunk has a distance: fewer than it takes means the scan stopped short.
    return kept if len(kept) >= min(limit, scope.passing_chunks) else exact()


def bm25_candidates(
    store: RagStore,
    scope: StoreFilter,
    limit: int,
    unfiltered: Callable[[int], list[tuple[int, float]]],
    *,
    scoring_text: str,
    filter_query: str | None,
) -> list[tuple[int, float]]:
    """The bm25 side under a filter: every passing chunk scored when they number at most
    BM25_EXACT_MAX_CHUNKS, else the bounded pass overfetched."""

    def exact() -> list[tuple[int, float]]:
        passing, params = filter_sql(scope.filter, named=True)
        return bm25.bm25_scored(
            store_id=store.pk,
            config=store.query_config,
            scoring_text=scoring_text,
            filter_query=filter_query,
            passing=passing,
            passing_params=params,
            limit=limit,
        )

    if scope.passing_chunks <= BM25_EXACT_MAX_CHUNKS:
        return exact()
    kept, cut = _overfetched(store, scope, limit, unfiltered)
    # Only chunks holding a query term score: a list that was not cut held every one there is.
    return exact() if len(kept) < limit and cut else kept
