"""AES-256-GCM sealing of stored credentials.

A sealed blob is a 12-byte random nonce followed by the ciphertext and tag. Every blob is bound
to where it lives through the associated data, so a ciphertext copied to another row does not
decrypt.
"""

from __future__ import annotations

import base64
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.conf import settings

from ragmux.core.errors import ServerFault

NONCE_BYTES = 12


class DecryptionFailed(ServerFault):
    """The blob was not sealed with this key, or not for this place."""

    code = "decryption_failed"


def generate_key() -> str:
    return base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")


def seal(plaintext: bytes, *, aad: bytes, key: bytes | None = None) -> bytes:
    nonce = os.urandom(NONCE_BYTES)
    return nonce + AESGCM(key or settings.RAGMUX_ENCRYPTION_KEY).encrypt(nonce, plaintext, aad)


def unseal(blob: bytes, *, aad: bytes, key: bytes | None = None) -> bytes:
    blob = bytes(blob)
    if len(blob) <= NONCE_BYTES:
        raise DecryptionFailed("sealed value is too short")
    try:
        return AESGCM(key or settings.RAGMUX_ENCRYPTION_KEY).decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], aad)
    except InvalidTag:
        raise DecryptionFailed("wrong key or tampered value") from None
