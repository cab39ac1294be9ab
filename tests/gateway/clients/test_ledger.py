"""The request log row of each call: tokens, cost from the price table, and the metrics."""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import httpx
import pytest

from tests.helpers import scrape, wait_for_logs

MESSAGES = [{"role": "user", "content": "What is the launch code for Project Falcon?"}]


def test_a_chat_row_is_priced_from_the_connections_rows(v1, project, project_key):
    from gateway.connections.models import ModelPrice

    ModelPrice.objects.filter(provider_type="openai", model="gpt-4o-mini").update(
        input_per_mtok=Decimal(1000), output_per_mtok=Decimal(2000)
    )
    ModelPrice.objects.filter(provider_type="openai", model="text-embedding-3-small").update(input_per_mtok=Decimal(10))
    usage = v1(project_key).post("/chat/completions", json={"messages": MESSAGES}).json()["usage"]
    [row] = wait_for_logs(1, project=project)
    assert row.embedding_tokens > 0  # the query embedding, charged to the project
    assert row.cost_micros == usage["prompt_tokens"] * 1000 + usage["completion_tokens"] * 2000 + (
        row.embedding_tokens * 10
    )
    assert row.cost_source == "price_table"


# Where each provider's chat routes are, and the model priced for it.
CACHING_PROVIDERS = {
    "openai": ("/v1", "gpt-4o-mini", ("openai.chat",)),
    "anthropic": ("", "claude-sonnet-4-5", ("anthropic.messages",)),
    "gemini": ("/v1beta", "gemini-2.5-flash", ("gemini.generate", "gemini.stream")),
}
CACHE_READ, CACHE_WRITE = 4, 6


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("provider", sorted(CACHING_PROVIDERS))
def test_prompt_cache_reads_and_writes_are_logged_and_priced_to_the_micro_dollar(
    v1, project, project_key, fake_upstream, provider, stream
):
    from gateway.connections.models import ModelConnection, ModelPrice

    path, model, routes = CACHING_PROVIDERS[provider]
    ModelConnection.objects.filter(pk=project.chat_connection_id).update(
        provider_type=provider, base_url=f"{fake_upstream.url}{path}", model_name=model
    )
    ModelPrice.objects.update_or_create(
        provider_type=provider,
        model=model,
        defaults={
            "input_per_mtok": Decimal(2),
            "output_per_mtok": Decimal(10),
            "cached_input_per_mtok": Decimal("0.5"),
            "cache_write_per_mtok": Decimal("2.5"),
        },
    )
    # The query's embedding costs nothing here: the row's cost is the chat's alone.
    ModelPrice.objects.filter(provider_type="openai", model="text-embedding-3-small").update(input_per_mtok=0)
    # Only Anthropic reports cache writes.
    written = CACHE_WRITE if provider == "anthropic" else 0
    for route in routes:
        fake_upstream.configure(route, prompt_cache=(CACHE_READ, written))
    body = {"messages": MESSAGES, "stream": stream, **({"stream_options": {"include_usage": True}} if stream else {})}
    response = v1(project_key).post("/chat/completions", json=body)
    assert response.status_code == 200, response.text
    [row] = wait_for_logs(1, project=project)
    assert (row.status_code, row.tokens_estimated, row.streamed) == (200, False, stream)
    assert (row.cached_prompt_tokens, row.cache_write_tokens) == (CACHE_READ, written)
    uncached = row.prompt_tokens - CACHE_READ - written
    assert uncached > 0
    # Micro-dollars per token: input 2, cache read 0.5, cache write 2.5, output 10.
    assert row.cost_micros == uncached * 2 + CACHE_READ // 2 + written * 5 // 2 + row.completion_tokens * 10
    assert row.cost_source == "price_table"


def test_unreported_usage_is_estimated_and_an_unknown_model_is_unpriced(v1, project, project_key, fake_upstream):
    from gateway.connections.models import ModelConnection

    ModelConnection.objects.filter(pk=project.chat_connection_id).update(model_name="house-model-v2")
    fake_upstream.configure("openai.chat", omit_usage=True)
    v1(project_key).post("/chat/completions", json={"messages": MESSAGES})
    [row] = wait_for_logs(1, project=project)
    assert row.tokens_estimated
    sent = fake_upstream.requests_to("openai.chat")[-1].json()["messages"]
    assert row.prompt_tokens == -(-sum(len(m["content"]) for m in sent) // 4)
    assert (row.cost_micros, row.cost_source, row.model) == (0, "unpriced", "house-model-v2")


def test_a_rerank_is_priced_by_its_own_row_and_its_missing_price_leaves_the_source_to_the_main_call():
    from gateway.clients.ledger import Spend, price
    from gateway.connections.models import ModelPrice

    rows = [
        ModelPrice(provider_type="openai", model="gpt-4o-mini", input_per_mtok=Decimal(1), output_per_mtok=Decimal(2)),
        ModelPrice(provider_type="cohere_rerank", model="rerank-v3.5", per_search_unit=Decimal("0.002")),
    ]
    chat = Spend("openai", "gpt-4o-mini", 100, 10)
    cohere = Spend("cohere_rerank", "rerank-v3.5", 500, rerank=True, search_units=2)
    unpriced = Spend("voyage_rerank", "rerank-9", 500, rerank=True)
    llm = Spend("openai", "gpt-4o-mini", 1000, 5, rerank=True)

    assert price([chat, cohere, llm], rows) == (120 + 4000 + 1010, "price_table")
    assert price([chat, unpriced], rows) == (120, "price_table")
    # A call that only reranked is unpriced when its reranker is.
    assert price([unpriced], rows) == (0, "unpriced")
    assert price([Spend("openai", "unknown", 10), cohere], rows) == (4000, "unpriced")


def test_retrieve_returns_hits_and_logs_its_embedding(v1, project, project_key):
    response = v1(project_key).post("/retrieve", json={"query": "Falcon launch code", "top_k": 99})
    assert response.status_code == 200
    body = response.json()
    assert (body["object"], body["mode"], body["backend"], body["fts_config"]) == ("list", "hybrid", "bm25", "english")
    [hit] = body["data"]
    assert hit["filename"] == "handbook.md" and "AMBER-7731" in hit["content"]
    assert body["usage"]["prompt_tokens"] > 0
    [row] = wait_for_logs(1, project=project)
    assert (row.endpoint, row.rag_hits, row.embedding_tokens, row.model) == (
        "retrieve",
        1,
        body["usage"]["prompt_tokens"],
        "text-embedding-3-small",
    )


def test_metrics_count_v1_calls(api, v1, project, project_key, metrics_on):
    from gateway.clients.ledger import flush

    v1(project_key).post("/chat/completions", json={"messages": MESSAGES})
    v1("sk-proj-wrong").get("/models")
    # The refused call's count may come in a batch after the logged call's.
    assert flush(5)
    text = scrape(api())
    assert 'ragmux_v1_requests_total{endpoint="chat",status="200"}' in text
    assert 'ragmux_v1_requests_total{endpoint="models",status="401"}' in text
    assert 'ragmux_v1_tokens_total{endpoint="chat",kind="completion"}' in text


def test_cors_only_for_listed_origins(v1, project_key, settings):
    settings.V1_CORS_ORIGINS = ["https://app.example"]
    preflight = v1().options(
        "/chat/completions",
        headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST"},
    )
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == "https://app.example"
    assert "authorization" in preflight.headers["access-control-allow-headers"]
    listed = v1(project_key).get("/models", headers={"Origin": "https://app.example"})
    assert listed.headers["access-control-allow-origin"] == "https://app.example"
    other = v1(project_key).get("/models", headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in other.headers


def test_a_stopping_server_writes_every_queued_row_first(second_web_process, project, project_key):
    from django.db import connection, transaction

    from gateway.clients.models import RequestLog

    def chat(_) -> int:
        return httpx.post(
            f"{second_web_process.url}/v1/chat/completions",
            json={"messages": MESSAGES},
            headers={"Authorization": f"Bearer {project_key}"},
            timeout=30,
        ).status_code

    with transaction.atomic():
        # A slow database: the server's inserts wait until this transaction ends.
        connection.cursor().execute(f"LOCK TABLE {RequestLog._meta.db_table} IN SHARE MODE")
        with ThreadPoolExecutor(max_workers=8) as pool:
            assert set(pool.map(chat, range(24))) == {200}
        second_web_process.process.send_signal(signal.SIGTERM)
        time.sleep(1)
        assert second_web_process.process.poll() is None  # still writing its queue
    second_web_process.process.wait(timeout=30)
    assert RequestLog.objects.filter(project=project).count() == 24


@pytest.fixture
def writer_database(transactional_db, monkeypatch):
    """The database as the ledger's writer reaches it, through a proxy the test can make refuse:
    new connections (the writer's) go through it."""
    from django.db import connection

    from tests.fakes.tcp_proxy import TcpProxy

    connection.ensure_connection()  # before the port changes: the test's own stays direct
    proxy = TcpProxy(int(connection.settings_dict["PORT"])).start()
    monkeypatch.setitem(connection.settings_dict, "PORT", str(proxy.port))
    yield proxy
    proxy.stop()


def wait_for_log(caplog, text: str) -> None:
    deadline = time.monotonic() + 10
    while text not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.05)
    assert text in caplog.text


def finish_calls(key, count: int) -> None:
    from gateway.clients.ledger import Call
    from gateway.clients.models import Endpoint

    for _ in range(count):
        Call(project=key.project, key=key, endpoint=Endpoint.MODELS).finish(200)


def test_rows_of_calls_finished_while_the_database_is_away_are_written_once_it_is_back(writer_database, caplog):
    from gateway.clients.ledger import flush
    from gateway.clients.models import RequestLog
    from tests.factories import GatewayKeyFactory

    key = GatewayKeyFactory()
    writer_database.refuse()
    finish_calls(key, 3)
    wait_for_log(caplog, "request log rows wait to be written")
    assert RequestLog.objects.count() == 0
    writer_database.forward()
    assert flush(10)
    assert RequestLog.objects.filter(key=key, status_code=200).count() == 3


def test_the_records_kept_for_an_absent_database_are_capped_and_the_calls_left_out_counted(
    writer_database, caplog, monkeypatch
):
    from gateway.clients import ledger
    from gateway.clients.models import RequestLog
    from tests.factories import GatewayKeyFactory

    key = GatewayKeyFactory()
    assert ledger.flush(5)
    monkeypatch.setattr(ledger, "MAX_UNWRITTEN", 3)
    writer_database.refuse()
    finish_calls(key, 5)
    assert "3 request log records wait for the database, the most a process keeps" in caplog.text
    wait_for_log(caplog, "request log rows wait to be written")
    writer_database.forward()
    assert ledger.flush(10)
    wait_for_log(caplog, "the database is back; 2 calls during its absence were not logged")
    assert RequestLog.objects.filter(key=key).count() == 3
