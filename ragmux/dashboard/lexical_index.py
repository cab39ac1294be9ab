"""What the store page and its settings form say about the store's lexical index: ready in its
language, or being rebuilt into another one after an ``index_config`` change, with progress."""

from __future__ import annotations

from dataclasses import dataclass

from django.urls import reverse

from stores.models import RagStore
from stores.rebuild import LexicalIndexState, lexical_index_state

# What an index built before punctuation split words (an empty `config`) is called.
EARLIER_INDEX = "an earlier version's index"


@dataclass(frozen=True)
class LexicalIndex:
    store_id: int
    state: LexicalIndexState

    @property
    def rebuilding(self) -> bool:
        return self.state.state == "rebuilding"

    @property
    def summary(self) -> str:
        state = self.state
        if not self.rebuilding:
            return f"{state.config} — ready"
        # No progress yet: the rebuild waits for a worker (or for the one running before it).
        if state.chunks_done is None:
            progress = "queued"
        else:
            progress = f"{state.chunks_done:,} of {state.chunks_total:,} chunks"
        return f"rebuilding from {state.config or EARLIER_INDEX} to {state.target_config}: {progress}"

    @property
    def url(self) -> str:
        """The state alone: what htmx polls while the index is rebuilt."""
        return reverse("dashboard:store-lexical-index", args=[self.store_id])


def lexical_index(store: RagStore) -> LexicalIndex:
    """From the store row, and Redis only while a rebuild is under way: no query of its own."""
    return LexicalIndex(store.pk, lexical_index_state(store))
