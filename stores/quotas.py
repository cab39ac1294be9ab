"""Upload quotas: pure arithmetic over what a store holds and what is being added."""

from __future__ import annotations

from dataclasses import dataclass


def effective_limit(store_limit: int, instance_ceiling: int) -> int:
    """The smaller non-zero of the two; 0 means unlimited."""
    limits = [limit for limit in (store_limit, instance_ceiling) if limit > 0]
    return min(limits) if limits else 0


@dataclass(frozen=True)
class Usage:
    documents: int
    bytes: int


@dataclass(frozen=True)
class Limits:
    documents: int
    bytes: int


def quota_violation(*, usage: Usage, limits: Limits, upload_bytes: int) -> str | None:
    """Why one more document of ``upload_bytes`` does not fit, or None when it does."""
    if limits.documents and usage.documents + 1 > limits.documents:
        return f"store quota exceeded: {usage.documents} of {limits.documents} documents"
    if limits.bytes and usage.bytes + upload_bytes > limits.bytes:
        return (
            f"store quota exceeded: {usage.bytes} of {limits.bytes} bytes used, "
            f"upload of {upload_bytes} bytes does not fit"
        )
    return None
