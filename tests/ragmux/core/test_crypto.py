import os

import pytest

from ragmux.core.crypto import DecryptionFailed, generate_key, seal, unseal
from ragmux.settings import decode_encryption_key


def test_sealed_value_opens_with_the_same_key_and_place():
    key = os.urandom(32)
    blob = seal(b"sk-secret", aad=b"row:1", key=key)
    assert b"sk-secret" not in blob
    assert unseal(blob, aad=b"row:1", key=key) == b"sk-secret"


def test_sealing_twice_gives_different_ciphertexts():
    key = os.urandom(32)
    assert seal(b"same", aad=b"a", key=key) != seal(b"same", aad=b"a", key=key)


def test_a_ciphertext_moved_to_another_row_does_not_open():
    key = os.urandom(32)
    blob = seal(b"sk-secret", aad=b"row:1", key=key)
    with pytest.raises(DecryptionFailed):
        unseal(blob, aad=b"row:2", key=key)


def test_the_wrong_key_does_not_open():
    blob = seal(b"sk-secret", aad=b"row:1", key=os.urandom(32))
    with pytest.raises(DecryptionFailed):
        unseal(blob, aad=b"row:1", key=os.urandom(32))


def test_generated_keys_decode_to_32_bytes():
    assert len(decode_encryption_key(generate_key())) == 32
