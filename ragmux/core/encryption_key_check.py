"""The key check value: proof, stored in the database, of which encryption key sealed it.

Every long-running process checks it before serving, so a wrong RAGMUX_ENCRYPTION_KEY stops
the start instead of failing credential by credential later.
"""

from __future__ import annotations

import logging

from django.db import DatabaseError

from ragmux.core.crypto import DecryptionFailed, seal, unseal
from ragmux.core.models import InstanceSetting

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
