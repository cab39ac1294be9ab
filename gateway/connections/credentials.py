"""Sealing, opening and masking of connection API keys."""

from __future__ import annotations

from ragmux.core.crypto import DecryptionFailed, seal, unseal


def connection_key_aad(connection_id: int) -> bytes:
    return f"model_connections:{connection_id}:api_key".encode()


def seal_api_key(connection_id: int, api_key: str) -> bytes:
    return seal(api_key.encode(), aad=connection_key_aad(connection_id))


def open_api_key(connection) -> str:
    """The connection's API key; :class:`DecryptionFailed`, naming the connection, when it was
    sealed under another encryption key than this server's. A connection tried before it is saved
    (``POST /admin/api/models/test``) holds its key in memory only, as ``trial_api_key``."""
    if connection.pk is None:
        return getattr(connection, "trial_api_key", "")
    if not connection.api_key_sealed:
        return ""
    try:
        return unseal(connection.api_key_sealed, aad=connection_key_aad(connection.id)).decode()
    except DecryptionFailed:
        raise DecryptionFailed(
            f'the API key of connection "{connection.name}" does not decrypt with this server\'s encryption key'
        ) from None


def mask_api_key(api_key: str) -> str:
    """A short, irreversible hint: the first three and last four characters of long keys."""
    if not api_key:
        return ""
    if len(api_key) < 16:
        return "****"
    return f"{api_key[:3]}…{api_key[-4:]}"
