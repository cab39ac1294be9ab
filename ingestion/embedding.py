"""Embedding calls made by ingestion: retried with backoff on failures that may pass."""

from __future__ import annotations

import time
from collections.abc import Sequence

from gateway.connections.providers.embeddings import EmbeddingProvider, Embeddings
from ragmux.core.errors import UpstreamFailed

MAX_ATTEMPTS = 4
FIRST_BACKOFF = 0.5
MAX_BACKOFF = 8.0


class EmbeddingFailed(Exception):
    """Embedding gave up; the message is the document's error."""


def embed_with_retries(provider: EmbeddingProvider, texts: Sequence[str], *, deadline: float) -> Embeddings:
    """Retries 429, 5xx, timeouts and connection failures with exponential backoff."""
    delay = FIRST_BACKOFF
    attempt = 1
    while True:
        try:
            return provider.embed(texts)
        except UpstreamFailed as exc:
            out_of_time = time.monotonic() + delay > deadline
            if not exc.retryable or attempt == MAX_ATTEMPTS or out_of_time:
                tries = f" after {attempt} attempts" if attempt > 1 else ""
                raise EmbeddingFailed(f"embedding failed{tries}: {exc}") from None
        time.sleep(delay)
        delay = min(delay * 2, MAX_BACKOFF)
        attempt += 1
