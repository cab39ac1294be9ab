"""The rerank inside a project's `/v1/retrieve` and chat: its tokens on the call's row (and in
retrieve's usage), priced by the connection that ran it, never by the row's own model; against
the fake upstream speaking Cohere's, Voyage's and OpenAI's wire formats."""

from __future__ import annotations

from decimal import Decimal

import pytest

from ingestion.services import IncomingFile, document_upload
from stores.services import store_update
from tests.helpers import wait_for_logs

QUESTION = "What is the launch code for Project Falcon?"
# Free embeddings, so that a row's cost is its chat's and its rerank's alone.
EMBEDDING_RATE = {"input_per_mtok": Decimal(0), "output_per_mtok": Decimal(0)}
CHAT_RATE = {"input_per_mtok": Decimal("2"), "output_per_mtok": Decimal("2")}


def set_price(provider_type: str, model: str, **rates) -> None:
    from gateway.connections.models import ModelPrice

    ModelPrice.objects.update_or_create(provider_type=provider_type, model=model, defaults=rates)


@pytest.fixture
def falcon_pool(falcon_store, ingest_now):
    """The falcon store with enough chunks to rerank, and its models priced."""
    files = [IncomingFile(f"launch-{n}.txt", f"Launch checklist {n} for Project Falcon.".encode()) for n in range(4)]
    assert document_upload(store=falcon_store, files=files).refusal is None
    ingest_now()
    set_price("openai", "text-embedding-3-small", **EMBEDDING_RATE)
    set_price("openai", "gpt-4o-mini", **CHAT_RATE)
    return falcon_store


def reranking(store, rerank_connection, backend: str):
    connection_id = None if backend == "llm" else rerank_connection(f"{backend}_rerank").pk
    values = {"rerank": True, "rerank_backend": backend, "rerank_connection_id": connection_id}
    return store_update(store=store, name=store.name, values=values)


def retrieve(client):
    response = client.post("/retrieve", json={"query": QUESTION, "top_k": 3})
    assert response.status_code == 200, response.text
    return response.json()


def test_an_llm_rerank_is_priced_by_the_projects_chat_connection(
    v1, project, project_key, falcon_pool, fake_upstream, rerank_connection
):
    reranking(falcon_pool, rerank_connection, "llm")

    body = retrieve(v1(project_key))

    assert body["reranked"] is True
    usage = body["usage"]
    assert usage["rerank_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["rerank_tokens"]
    [row] = wait_for_logs(1, project=project)
    assert (row.endpoint, row.model) == ("retrieve", "text-embedding-3-small")
    assert (row.rerank_tokens, row.embedding_tokens) == (usage["rerank_tokens"], usage["prompt_tokens"])
    # At the chat connection's 2 per million tokens; the embedding model is free.
    assert (row.cost_micros, row.cost_source) == (usage["rerank_tokens"] * 2, "price_table")


def test_a_cohere_rerank_adds_its_search_unit(v1, project, project_key, falcon_pool, fake_upstream, rerank_connection):
    reranking(falcon_pool, rerank_connection, "cohere")
    set_price("cohere_rerank", "rerank-v3.5", per_search_unit=Decimal("0.0031"), input_per_mtok=Decimal(9))

    body = retrieve(v1(project_key))

    assert body["reranked"] is True
    [row] = wait_for_logs(1, project=project)
    assert row.rerank_tokens == body["usage"]["rerank_tokens"] > 0
    assert row.cost_micros == 3100


def test_a_chats_voyage_rerank_is_priced_at_voyages_rate_beside_the_chat(
    v1, project, project_key, falcon_pool, fake_upstream, rerank_connection
):
    reranking(falcon_pool, rerank_connection, "voyage")
    set_price("voyage_rerank", "rerank-2.5", input_per_mtok=Decimal(50), output_per_mtok=Decimal(0))

    response = v1(project_key).post("/chat/completions", json={"messages": [{"role": "user", "content": QUESTION}]})

    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    voyage_tokens = fake_upstream.requests_to("voyage.rerank")[0].json()
    words = len(voyage_tokens["query"].split()) + sum(len(text.split()) for text in voyage_tokens["documents"])
    [row] = wait_for_logs(1, project=project)
    assert (row.endpoint, row.prompt_tokens, row.rerank_tokens) == ("chat", usage["prompt_tokens"], words)
    chat_cost = (usage["prompt_tokens"] + usage["completion_tokens"]) * 2
    assert (row.cost_micros, row.cost_source) == (chat_cost + words * 50, "price_table")


def test_an_unpriced_reranker_adds_nothing_and_leaves_the_source_to_the_call(
    v1, project, project_key, falcon_pool, fake_upstream, rerank_connection
):
    from gateway.connections.models import ModelPrice

    reranking(falcon_pool, rerank_connection, "voyage")
    ModelPrice.objects.filter(provider_type="voyage_rerank").delete()

    body = retrieve(v1(project_key))

    assert body["reranked"] is True
    [row] = wait_for_logs(1, project=project)
    assert row.rerank_tokens > 0
    assert (row.cost_micros, row.cost_source) == (0, "price_table")


def test_a_failed_rerank_spends_nothing(v1, project, project_key, falcon_pool, fake_upstream, rerank_connection):
    reranking(falcon_pool, rerank_connection, "cohere")
    fake_upstream.configure("cohere.rerank", status=500)

    body = retrieve(v1(project_key))

    assert (body["reranked"], body["rerank_fallback"]) == (False, True)
    assert body["usage"]["rerank_tokens"] == 0
    [row] = wait_for_logs(1, project=project)
    assert (row.rerank_tokens, row.cost_micros) == (0, 0)


def test_a_budget_counts_the_rerank_tokens(v1, project, project_key, falcon_pool, fake_upstream, rerank_connection):
    from gateway.clients.models import Project, UsageCounter

    reranking(falcon_pool, rerank_connection, "llm")
    Project.objects.filter(pk=project.pk).update(budget_daily_tokens=10**9)

    body = retrieve(v1(project_key))
    [row] = wait_for_logs(1, project=project)

    counted = UsageCounter.objects.get(tier="project", owner_id=project.pk, period="day")
    assert counted.prompt_tokens == body["usage"]["total_tokens"] == row.embedding_tokens + row.rerank_tokens


# Replies a reranker was billed for but that name no passage we sent, by backend: the knobs that
# make the fake upstream answer so, in each provider's own wire format.
UNUSABLE_REPLIES = {
    "cohere": ("cohere.rerank", {"rerank_results": []}),
    "voyage": ("voyage.rerank", {"rerank_results": [99]}),
    "llm": ("openai.chat", {"answer": "These passages all look relevant to me."}),
}


@pytest.mark.parametrize("backend", sorted(UNUSABLE_REPLIES))
def test_a_billed_rerank_whose_reply_could_not_be_used_is_still_on_the_row(
    v1, project, project_key, falcon_pool, fake_upstream, rerank_connection, backend
):
    reranking(falcon_pool, rerank_connection, backend)
    set_price("cohere_rerank", "rerank-v3.5", per_search_unit=Decimal("0.0031"))
    set_price("voyage_rerank", "rerank-2.5", input_per_mtok=Decimal(50), output_per_mtok=Decimal(0))
    route, knobs = UNUSABLE_REPLIES[backend]
    fake_upstream.configure(route, **knobs)

    body = retrieve(v1(project_key))

    assert (body["reranked"], body["rerank_fallback"]) == (False, True)
    [row] = wait_for_logs(1, project=project)
    assert row.rerank_tokens == body["usage"]["rerank_tokens"] > 0
    expected_micros = {"cohere": 3100, "voyage": row.rerank_tokens * 50, "llm": row.rerank_tokens * 2}[backend]
    assert row.cost_micros == expected_micros


def test_the_rerank_endpoints_unusable_but_billed_reply_is_on_the_row(
    v1, project, project_key, falcon_pool, fake_upstream, rerank_connection
):
    from gateway.clients.services import key_create

    reranking(falcon_pool, rerank_connection, "cohere")
    set_price("cohere_rerank", "rerank-v3.5", per_search_unit=Decimal("0.0031"))
    fake_upstream.configure("cohere.rerank", rerank_results=[7, 8])
    key = key_create(project=project, name="reranking", scopes=["rerank"], expires_at=None).key

    answer = v1(key).post("/rerank", json={"model": "rerank-v3.5", "query": "q", "documents": ["a b", "c"]})

    assert answer.status_code == 502
    [row] = wait_for_logs(1, project=project)
    assert (row.endpoint, row.rerank_tokens, row.cost_micros) == ("rerank", 4, 3100)
