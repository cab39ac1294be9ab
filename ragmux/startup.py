"""Checks every long-running process makes before it serves anything."""

from __future__ import annotations

import logging

from django.db import DatabaseError

from ragmux.crypto import DecryptionFailed, seal, unseal
from ragmux.models import InstanceSetting

logger = logging.getLogger("ragmux.startup")

KEY_CHECK_NAME = "encryption_key_check"
KEY_CHECK_PLAINTEXT = b"ragmux encryption key check"
KEY_CHECK_AAD = b"instance_settings:" + KEY_CHECK_NAME.encode()

WRONG_KEY_MESSAGE = (
    "startup refused: RAGMUX_ENCRYPTION_KEY is not the key this database's credentials were "
    "encrypted with (the stored key check value does not decrypt). Start with the original key, "
    "or run `ragmux rotate-key` with the original key to move to a new one."
)


class WrongEncryptionKey(SystemExit):
    def __init__(self) -> None:
        super().__init__(WRONG_KEY_MESSAGE)


def seal_key_check(key: bytes | None = None) -> bytes:
    return seal(KEY_CHECK_PLAINTEXT, aad=KEY_CHECK_AAD, key=key)


def ensure_key_check(**_: object) -> None:
    """Writes the key check value if this database has none yet (the first start)."""
    InstanceSetting.objects.get_or_create(key=KEY_CHECK_NAME, defaults={"value": seal_key_check()})


def log_store_warnings() -> None:
    """Stores that search slower or differently than their owners may expect, said once per start."""
    from stores.models import RagStore
    from stores.services import warn_about_fts_config
    from stores.vector_tables import stores_missing_index_names

    try:
        missing = stores_missing_index_names()
        for store in RagStore.objects.filter(search_backend="pgvector").exclude(fts_config="simple"):
            warn_about_fts_config(store)
    except DatabaseError as exc:
        logger.warning("store checks skipped: %s", exc.__class__.__name__)
        return
    if missing:
        logger.warning("stores searched by exact scan because their HNSW index is missing: %s", ", ".join(missing))


def check_encryption_key() -> None:
    try:
        row = InstanceSetting.objects.filter(key=KEY_CHECK_NAME).first()
    except DatabaseError as exc:
        # Not migrated yet, or the database is still coming up: `migrate` writes the value.
        logger.warning("encryption key check skipped: %s", exc.__class__.__name__)
        return
    if row is None:
        ensure_key_check()
        return
    try:
        unseal(row.value, aad=KEY_CHECK_AAD)
    except DecryptionFailed:
        raise WrongEncryptionKey() from None
