"""OpenAI's shapes of files and vector stores, and the statuses they take from our documents."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from gateway.clients.vector_store_shapes import (
    FileState,
    batch_status,
    chunking_strategy,
    chunking_values,
    file_counts,
    search_result,
    vector_store_file_object,
    vector_store_object,
    vector_store_status,
)

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("document_status", "status"),
    [("pending", "in_progress"), ("processing", "in_progress"), ("ready", "completed"), ("failed", "failed")],
)
def test_a_files_status_is_its_documents(document_status, status):
    state = FileState(document_status=document_status, document_error="no text", error_stage="parse")
    assert state.status == status
    assert state.last_error == ({"code": "invalid_file", "message": "no text"} if status == "failed" else None)


@pytest.mark.parametrize(
    ("stage", "code"),
    [("upload", "server_error"), ("parse", "invalid_file"), ("embed", "server_error"), ("", "server_error")],
)
def test_a_failed_documents_stage_says_whose_fault_it_was(stage, code):
    state = FileState(document_status="failed", document_error="", error_stage=stage)
    assert state.last_error["code"] == code and state.last_error["message"]


@pytest.mark.parametrize(
    ("refusal", "code"),
    [
        ("duplicate_document", "invalid_file"),
        ("store_quota", "invalid_file"),
        ("unsupported_format", "unsupported_file"),
    ],
)
def test_a_file_the_store_refused_failed_with_the_refusal(refusal, code):
    state = FileState(document_status=None, refusal_code=refusal, refusal_message="why")
    assert (state.status, state.last_error) == ("failed", {"code": code, "message": "why"})


def test_a_cancelled_file_is_cancelled_whatever_else():
    assert FileState(document_status=None, refusal_code="x", cancelled=True).status == "cancelled"
    assert FileState(document_status=None, cancelled=True).last_error is None


def test_counts_and_statuses_of_stores_and_batches():
    counts = file_counts(["completed", "failed", "in_progress", "completed"])
    assert counts == {"in_progress": 1, "completed": 2, "cancelled": 0, "failed": 1, "total": 4}
    assert batch_status(counts, cancelled=False) == "in_progress"
    assert batch_status(counts, cancelled=True) == "cancelled"
    assert batch_status(file_counts(["failed", "failed"]), cancelled=False) == "failed"
    assert batch_status(file_counts(["failed", "completed"]), cancelled=False) == "completed"
    assert batch_status(file_counts([]), cancelled=False) == "completed"
    assert vector_store_status(counts, expiry=None, now=NOW) == "in_progress"
    assert vector_store_status(file_counts([]), expiry=NOW, now=NOW) == "expired"
    assert vector_store_status(file_counts([]), expiry=NOW + timedelta(seconds=1), now=NOW) == "completed"


def test_chunking_round_trips_between_tokens_and_characters():
    static = {"type": "static", "static": {"max_chunk_size_tokens": 300, "chunk_overlap_tokens": 100}}
    assert chunking_values(static) == {"chunk_size": 1200, "chunk_overlap": 400}
    assert chunking_strategy(1200, 400) == static
    assert chunking_values({"type": "auto"}) == chunking_values(None) == {}


def test_a_vector_store_object():
    vector_store = SimpleNamespace(
        pk="vs_1", created_at=NOW, last_active_at=NOW, expires_after_days=2, name="n", metadata={"a": "b"}
    )
    shape = vector_store_object(vector_store, counts=file_counts(["completed"]), usage_bytes=9, now=NOW)
    assert shape["object"] == "vector_store" and shape["status"] == "completed" and shape["usage_bytes"] == 9
    assert shape["expires_at"] == int(NOW.timestamp()) + 2 * 86400
    assert shape["expires_after"] == {"anchor": "last_active_at", "days": 2}


def test_a_vector_store_file_without_a_document_has_no_bytes_nor_attributes():
    attached = SimpleNamespace(
        file_id="file-1",
        vector_store_id="vs_1",
        created_at=NOW,
        document=None,
        refusal_code="store_quota",
        refusal_message="full",
        cancelled=False,
    )
    shape = vector_store_file_object(attached, store=SimpleNamespace(chunk_size=1000, chunk_overlap=200))
    assert (shape["usage_bytes"], shape["attributes"], shape["status"]) == (0, {}, "failed")
    assert shape["chunking_strategy"]["static"] == {"max_chunk_size_tokens": 250, "chunk_overlap_tokens": 50}


def test_a_search_result_takes_the_rerankers_score_when_it_ranked():
    hit = SimpleNamespace(filename="a.md", score=0.4, rerank_score=None, attributes={"k": 1}, content="text")
    assert search_result(hit, file_id="file-1") == {
        "file_id": "file-1",
        "filename": "a.md",
        "score": 0.4,
        "attributes": {"k": 1},
        "content": [{"type": "text", "text": "text"}],
    }
    hit.rerank_score = 0.9
    assert search_result(hit, file_id="file-1")["score"] == 0.9
