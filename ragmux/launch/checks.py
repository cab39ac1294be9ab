"""Checks every long-running process makes before it serves anything."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import DatabaseError

from ragmux.core.encryption_key_check import check_encryption_key
from stores.backends import text_search_config_exists
from stores.choices import SearchBackend
from stores.models import RagStore
from stores.services import warn_about_fts_config
from stores.vector_tables import stores_missing_index_names

logger = logging.getLogger("ragmux.startup")


def log_store_warnings() -> None:
    """Stores that search slower or differently than their owners may expect, said once per start."""
    try:
        missing = stores_missing_index_names()
        for store in RagStore.objects.filter(search_backend=SearchBackend.PGVECTOR).exclude(fts_config="simple"):
            warn_about_fts_config(store)
    except DatabaseError as exc:
        logger.warning("store checks skipped: %s", exc.__class__.__name__)
        return
    if missing:
        logger.warning("stores searched by exact scan because their HNSW index is missing: %s", ", ".join(missing))


def check_default_index_config() -> None:
    """Refuses a DEFAULT_INDEX_CONFIG the database lacks: every store created with the defaults
    would be refused, naming a setting its creator never chose."""
    try:
        exists = text_search_config_exists(settings.DEFAULT_INDEX_CONFIG)
    except DatabaseError as exc:
        logger.warning("DEFAULT_INDEX_CONFIG check skipped: %s", exc.__class__.__name__)
        return
    if not exists:
        raise SystemExit(
            f"startup refused: DEFAULT_INDEX_CONFIG {settings.DEFAULT_INDEX_CONFIG!r} is not a text search "
            "configuration of this database (`SELECT cfgname FROM pg_ts_config` lists them)"
        )


def refuse_test_only_settings() -> None:
    """Refuses the test suite's stand-in name resolution for image hosts: with it, an image URL
    naming such a host would reach the address the stand-in gives, private or not."""
    if settings.IMAGE_FETCH_TEST_RESOLVER:
        raise SystemExit("startup refused: IMAGE_FETCH_TEST_RESOLVER is for the test suite only")


def log_image_policy() -> None:
    """What the gateway does with remote images for Gemini and Ollama, said once per start."""
    if not settings.IMAGE_FETCH:
        logger.info("image policy: remote images are not fetched (IMAGE_FETCH=false); data: URLs only")
        return
    logger.info(
        "image policy: remote images fetched up to %d MiB within %gs, %d per request, %d at once; "
        "private addresses never reached",
        settings.IMAGE_FETCH_MAX_MB,
        settings.IMAGE_FETCH_TIMEOUT,
        settings.IMAGE_FETCH_MAX_PER_REQUEST,
        settings.IMAGE_FETCH_MAX_CONCURRENT,
    )


def run_startup_checks() -> None:
    refuse_test_only_settings()
    check_encryption_key()
    check_default_index_config()
    log_store_warnings()
    log_image_policy()
