import pytest

# Three documents, each answering one question by its words alone (a lexical search finds it first).
DOCUMENTS = {
    "pasta.md": "# Pasta\n\nBoil the spaghetti in salted water for nine minutes.",
    "bikes.md": "# Bicycles\n\nOil the chain of the bicycle every month.",
    "taxes.md": "# Taxes\n\nFile the income tax return before April.",
}


@pytest.fixture
def evaluated_store(fake_connection, fake_upstream, ingest_now):
    """A store of three ingested documents (one per subject), searched lexically by default."""
    from ingestion.services import IncomingFile, document_upload
    from stores.services import store_create

    store = store_create(
        name="kb", values={"embedding_connection_id": fake_connection.id, "search_mode": "lexical", "top_k": 3}
    )
    files = [IncomingFile(filename=name, data=text.encode()) for name, text in DOCUMENTS.items()]
    assert document_upload(store=store, files=files).refusal is None
    ingest_now()
    fake_upstream.forget_requests()
    return store


@pytest.fixture
def documents(evaluated_store) -> dict[str, int]:
    """File name stem → document id."""
    from stores.models import Document

    return {
        filename.removesuffix(".md"): pk
        for pk, filename in Document.objects.filter(store=evaluated_store).values_list("pk", "filename")
    }


@pytest.fixture
def evaluation_set(evaluated_store, documents, personas):
    """Three questions: two answered by their documents' words, one whose document shares none."""
    from retrieval.evaluation.services import evaluation_set_create

    return evaluation_set_create(
        store=evaluated_store,
        name="basics",
        questions=[
            {"text": "how long to boil spaghetti", "judgements": [{"document_id": documents["pasta"], "grade": 2}]},
            {"text": "bicycle chain oil", "judgements": [{"document_id": documents["bikes"], "grade": 1}]},
            {"text": "quantum chromodynamics", "judgements": [{"document_id": documents["taxes"], "grade": 1}]},
        ],
        user=personas["admin"],
    )
