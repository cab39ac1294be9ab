import pytest
from django.db import connection

from ingestion.services import IncomingFile, document_upload
from retrieval.search import store_search
from stores.models import RagStore
from stores.services import store_create


@pytest.fixture
def ingested_store(fake_connection, ingest_now):
    store = store_create(name="kb", values={"embedding_connection_id": fake_connection.id})
    document_upload(store=store, files=[IncomingFile(filename=f"{n}.txt", data=f"text {n}".encode()) for n in range(3)])
    ingest_now()
    return RagStore.objects.get(pk=store.pk)


def metric_lines(client) -> list[str]:
    response = client.get("/metrics")
    assert response.status_code == 200
    return [line for line in response.text.splitlines() if line.startswith("ragmux_")]


def test_metrics_expose_ingestion_and_queue_figures(api, ingested_store):
    lines = metric_lines(api())
    assert any(line.startswith('ragmux_ingest_embed_tokens_total{source="reported"}') for line in lines)
    assert 'ragmux_ingest_documents{status="ready"} 3.0' in lines
    assert "ragmux_rag_index_missing 0.0" in lines
    assert any(line.startswith('ragmux_ingest_stage_seconds_count{stage="embed"}') for line in lines)


def test_a_store_whose_index_is_gone_is_counted_and_still_searched(api, ingested_store, settings):
    settings.VECTOR_EXACT_SCAN_MAX_CHUNKS = 0  # would use the graph if it were there
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX chunk_embeddings_8_hnsw")
    assert "ragmux_rag_index_missing 1.0" in metric_lines(api())
    result = store_search(store=ingested_store, query="text", overrides={"mode": "vector", "top_k": 3})
    assert len(result.hits) == 3
