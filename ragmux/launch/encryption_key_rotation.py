"""Rotation of the encryption key that seals stored credentials (`ragmux rotate-key`), and the
credentials a restore without their key leaves behind."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from gateway.connections.credentials import connection_key_aad
from gateway.connections.models import ModelConnection
from ragmux.core.crypto import DecryptionFailed, seal, unseal
from ragmux.core.encryption_key_check import KEY_CHECK_NAME, seal_key_check
from ragmux.core.models import InstanceSetting


class EncryptionKeyRotationFailed(Exception):
    pass


def rotate_encryption_key(*, new_key: bytes) -> int:
    """Re-seals every credential and the key check value with ``new_key`` in one transaction.

    Each new ciphertext is verified to open with the new key before anything commits; any
    failure rolls the whole rotation back. Returns the number of credentials re-sealed.
    """
    count = 0
    with transaction.atomic():
        for connection in ModelConnection.objects.select_for_update().exclude(api_key_sealed=None):
            aad = connection_key_aad(connection.id)
            try:
                plaintext = unseal(connection.api_key_sealed, aad=aad)
            except DecryptionFailed as exc:
                raise EncryptionKeyRotationFailed(f"connection {connection.name!r}: {exc}") from None
            sealed = seal(plaintext, aad=aad, key=new_key)
            if unseal(sealed, aad=aad, key=new_key) != plaintext:
                raise EncryptionKeyRotationFailed(f"connection {connection.name!r}: verification failed")
            ModelConnection.objects.filter(pk=connection.pk).update(api_key_sealed=sealed)
            count += 1
        InstanceSetting.objects.update_or_create(key=KEY_CHECK_NAME, defaults={"value": seal_key_check(new_key)})
    return count


# What a connection whose key was cleared by a restore says until its key is entered again.
KEY_NEEDS_REENTRY = (
    "the API key was sealed with another encryption key (restored from a backup without it): enter it again"
)


def credentials_of_another_key_cleared() -> list[str]:
    """After a restore made without the backup's encryption key: every stored API key, which no
    longer opens, is cleared and its connection marked as needing it entered again (its last
    test failed, saying so); the key check value is sealed anew with this server's key, so the
    instance starts. Returns the names of the connections marked."""
    with transaction.atomic():
        marked = list(
            ModelConnection.objects.select_for_update().exclude(api_key_sealed=None).values_list("name", flat=True)
        )
        ModelConnection.objects.filter(name__in=marked).update(
            api_key_sealed=None, last_test_at=timezone.now(), last_test_ok=False, last_test_error=KEY_NEEDS_REENTRY
        )
        InstanceSetting.objects.update_or_create(key=KEY_CHECK_NAME, defaults={"value": seal_key_check()})
    return marked
