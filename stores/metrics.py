"""Gauges computed from the database when `/metrics` is scraped."""

from __future__ import annotations

import logging

from django.db import DatabaseError
from prometheus_client.core import GaugeMetricFamily

from stores.selectors import documents_by_status
from stores.vector_tables import stores_missing_index_names

logger = logging.getLogger("ragmux.core.metrics")


class DatabaseGaugesCollector:
    def describe(self):
        # Declaring nothing up front keeps registration from querying the database.
        return []

    def collect(self):
        try:
            by_status = documents_by_status()
            missing = len(stores_missing_index_names())
        except DatabaseError as exc:
            logger.warning("database gauges unavailable: %s", exc)
            return
        queue = GaugeMetricFamily("ragmux_ingest_documents", "Documents by ingestion status", labels=["status"])
        for status, count in sorted(by_status.items()):
            queue.add_metric([status], count)
        yield queue
        yield GaugeMetricFamily(
            "ragmux_rag_index_missing",
            "Stores whose vectors have no HNSW index (searched by exact scan)",
            value=missing,
        )
