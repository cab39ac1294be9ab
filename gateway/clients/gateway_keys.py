"""Gateway key material: generation and hashing (pure)."""

from __future__ import annotations

import hashlib
import secrets
import string

KEY_PREFIX = "sk-proj-"
_ALPHABET = string.ascii_letters + string.digits
_SECRET_LENGTH = 43  # about 256 bits over 62 characters
DISPLAY_PREFIX_LENGTH = 15


def new_key() -> str:
    return KEY_PREFIX + "".join(secrets.choice(_ALPHABET) for _ in range(_SECRET_LENGTH))


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()
