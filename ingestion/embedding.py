"""Embedding calls made by ingestion: retried with backoff on failures that may pass."""

from __future__ import annotations

import time
from collections.abc import Sequence

from gateway.connections.providers.embeddings import EmbeddingProvider, Embeddings
from gateway.connections.providers.upstream_errors import retry_wait
from ragmux.core.errors import UpstreamFailed

MAX_ATTEMPTS = 4
FIRST_BACKOFF = 0.5
MAX_BACKOFF = 8.0


class EmbeddingFailed(Exception):
    """Embedding gave up; the message is the document's error."""


def embed_with_retries(provider: EmbeddingProvider, texts: Sequence[str], *, deadline: float) -> Embeddings:
    """Retries 429, 5xx, timeouts and connection failures after the provider's ``Retry-After``,
    else with exponential backoff, while the wait fits before ``deadline``."""
    delay = FIRST_BACKOFF
    attempt = 1
    while True:
        try:
            return provider.embed(texts)
        except UpstreamFailed as exc:
            wait = retry_wait(exc, backoff=delay)
            out_of_time = time.monotonic() + wait > deadline
            if not exc.retryable or attempt == MAX_ATTEMPTS or out_of_time:
                tries = f" after {attempt} attempts" if attempt > 1 else ""
                raise EmbeddingFailed(f"embedding failed{tries}: {exc}") from None
        time.sleep(wait)
        delay = min(delay * 2, MAX_BACKOFF)
        attempt += 1
