"""Quota meters: what a store holds against its effective limits."""

from __future__ import annotations

from dataclasses import dataclass

from ragmux.dashboard.spend import MeterBounds
from stores import selectors
from stores.models import RagStore


@dataclass(frozen=True)
class Meter(MeterBounds):
    used: int
    limit: int  # 0 = unlimited

    @property
    def percent(self) -> int:
        return min(100, round(100 * self.used / self.limit)) if self.limit else 0

    @property
    def full(self) -> bool:
        return bool(self.limit) and self.used >= self.limit


@dataclass(frozen=True)
class StoreQuota:
    documents: Meter
    bytes: Meter


def store_quota(store: RagStore) -> StoreQuota:
    """From a store read by store_list or store_get: no query of its own."""
    usage, limits = selectors.listed_usage(store), selectors.store_limits(store)
    return StoreQuota(Meter(usage.documents, limits.documents), Meter(usage.bytes, limits.bytes))
