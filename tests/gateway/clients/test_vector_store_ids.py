"""The public ids of files, vector stores and batches: made and recognised in one place."""

from __future__ import annotations

import pytest

from gateway.clients.vector_store_ids import (
    FILE_BATCH_PREFIX,
    FILE_PREFIX,
    VECTOR_STORE_PREFIX,
    document_file_id,
    is_id,
    new_file_batch_id,
    new_file_id,
    new_vector_store_id,
)


def test_each_kind_of_id_is_recognised_as_its_own_only():
    made = {
        FILE_PREFIX: new_file_id(),
        VECTOR_STORE_PREFIX: new_vector_store_id(),
        FILE_BATCH_PREFIX: new_file_batch_id(),
    }
    for prefix in made:
        assert [other for other, other_id in made.items() if is_id(other_id, prefix)] == [prefix]
    assert new_file_id() != new_file_id()


@pytest.mark.parametrize(
    "text", ["file-", "file-" + "0" * 23, "file-" + "G" * 24, "file-" + "0" * 24 + "\x00", None, 5]
)
def test_what_was_not_made_here_is_no_id(text):
    assert not is_id(text, FILE_PREFIX)


def test_a_documents_own_id_is_stable_and_names_no_uploaded_file():
    assert document_file_id(42) == document_file_id(42) == "file-doc-42"
    assert not is_id(document_file_id(42), FILE_PREFIX)
