import pytest
import redis
from django.conf import settings
from django.db import connection

from ingestion.services import IncomingFile, document_upload
from retrieval.search import store_search
from stores.models import RagStore
from stores.services import store_create
from tests.helpers import scrape

pytestmark = pytest.mark.usefixtures("metrics_on")


@pytest.fixture
def ingested_store(fake_connection, ingest_now):
    store = store_create(name="kb", values={"embedding_connection_id": fake_connection.id})
    document_upload(store=store, files=[IncomingFile(filename=f"{n}.txt", data=f"text {n}".encode()) for n in range(3)])
    ingest_now()
    return RagStore.objects.get(pk=store.pk)


def metric_lines(client) -> list[str]:
    return [line for line in scrape(client).splitlines() if line.startswith("ragmux_")]


def metric_value(client, series: str) -> float:
    """The value of one series as `/metrics` serves it, 0 when it is not there."""
    for line in metric_lines(client):
        name, _, value = line.rpartition(" ")
        if name == series:
            return float(value)
    return 0.0


EMBED_TOKENS = 'ragmux_ingest_embed_tokens_total{source="reported"}'
COMMITS = 'ragmux_ingest_stage_seconds_count{stage="commit"}'


def test_metrics_are_recorded_and_served_while_redis_is_unreachable(
    api, fake_connection, ingest_now, redis_unreachable
):
    client = api()
    before = {series: metric_value(client, series) for series in (EMBED_TOKENS, COMMITS)}
    store = store_create(name="kb", values={"embedding_connection_id": fake_connection.id})
    document_upload(store=store, files=[IncomingFile(filename=f"{n}.txt", data=f"text {n}".encode()) for n in range(3)])
    ingest_now()
    assert metric_value(client, EMBED_TOKENS) > before[EMBED_TOKENS]
    assert metric_value(client, COMMITS) == before[COMMITS] + 3


def test_a_redis_restart_rolls_no_counter_back(api, ingested_store):
    client = api()
    before = {series: metric_value(client, series) for series in (EMBED_TOKENS, COMMITS)}
    assert before[EMBED_TOKENS] > 0 and before[COMMITS] >= 3
    with redis.Redis.from_url(settings.REDIS_URL) as suite_redis:
        suite_redis.flushdb()  # what a Redis restarted without its data holds
    assert {series: metric_value(client, series) for series in (EMBED_TOKENS, COMMITS)} == before


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


def test_a_metric_that_cannot_be_recorded_fails_nothing_and_is_logged_once(caplog):
    from ragmux.core import metrics

    for _ in range(3):
        metrics.increment(metrics.V1_REQUESTS, endpoint="chat")  # its status label is missing
        metrics.observe(metrics.SEARCH_SECONDS, 0.1, mode="vector")
    assert [record.levelname for record in caplog.records if record.name == "ragmux.core.metrics"] == ["WARNING"]
