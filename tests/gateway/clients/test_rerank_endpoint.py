"""`POST /v1/rerank` over HTTP: the store's rerank connection (Cohere, Voyage, a chat model) and
rerank routes, against the fake upstream speaking each provider's wire format; the key's scope,
the refusals in OpenAI's envelope, the call's own request log row and its price to the
micro-dollar."""

from __future__ import annotations

from decimal import Decimal

import pytest

from tests.helpers import forget_cooldowns, wait_for_logs

DOCUMENTS = ["alpha one", "beta two words", "gamma three little words"]
QUERY = "which greek letter"
ROUTES = {"cohere": "cohere.rerank", "voyage": "voyage.rerank", "llm": "openai.chat"}
PROVIDERS = {"cohere": "cohere_rerank", "voyage": "voyage_rerank", "llm": "openai"}
MODELS = {"cohere": "rerank-v3.5", "voyage": "rerank-2.5", "llm": "gpt-4.1-mini"}
# Rates chosen so that every part of a price shows in the micro-dollars.
RATES = {
    # A per-search-unit rate with token rates an operator also typed in: only the units count.
    "cohere": {"per_search_unit": Decimal("0.0025"), "input_per_mtok": Decimal("5"), "output_per_mtok": Decimal("5")},
    "voyage": {"input_per_mtok": Decimal("120"), "output_per_mtok": Decimal("0")},
    "llm": {"input_per_mtok": Decimal("3"), "output_per_mtok": Decimal("7")},
}


@pytest.fixture(autouse=True)
def _fresh_cooldowns():
    yield
    forget_cooldowns()


def make_connection(fake_upstream, backend: str, *, name: str | None = None):
    from gateway.connections.services import connection_create

    return connection_create(
        name=name or f"{backend}-reranker",
        provider_type=PROVIDERS[backend],
        base_url=f"{fake_upstream.url}/v1" if backend == "llm" else fake_upstream.url,
        model_name=MODELS[backend],
        dimensions=None,
        api_key="sk-rerank-key-0123456789",
    )


def price(backend: str, **rates):
    from gateway.connections.models import ModelPrice

    ModelPrice.objects.update_or_create(
        provider_type=PROVIDERS[backend], model=MODELS[backend], defaults=rates or RATES[backend]
    )


def rerank_with(store, connection, backend: str) -> None:
    from stores.models import RagStore

    RagStore.objects.filter(pk=store.pk).update(rerank_connection=connection, rerank_backend=backend)


@pytest.fixture(params=["cohere", "voyage", "llm"])
def backend(request, fake_upstream, falcon_store) -> str:
    """The falcon store reranking through a priced connection of each backend."""
    rerank_with(falcon_store, make_connection(fake_upstream, request.param), request.param)
    price(request.param)
    return request.param


def rerank(client, model: str, documents=DOCUMENTS, **extra):
    return client.post("/rerank", json={"model": model, "query": QUERY, "documents": documents, **extra})


def expected_micros(backend: str, usage: dict) -> int:
    rates = RATES[backend]
    if backend == "cohere":
        return int(rates["per_search_unit"] * 1_000_000)  # one search unit, the token rates unused
    cost = usage["prompt_tokens"] * rates["input_per_mtok"] + usage["completion_tokens"] * rates["output_per_mtok"]
    return int(cost.quantize(Decimal(1), rounding="ROUND_HALF_UP"))


def test_each_backend_reranks_and_prices_the_call_by_its_connection(v1, project, project_key, backend, fake_upstream):
    response = rerank(v1(project_key), MODELS[backend], top_n=2)

    assert response.status_code == 200, response.text
    body = response.json()
    # The fakes rank the documents in reverse.
    assert [result["index"] for result in body["results"]] == [2, 1]
    assert all(0 <= result["relevance_score"] <= 1 for result in body["results"])
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0
    assert body["meta"]["tokens"] == {
        "input_tokens": usage["prompt_tokens"],
        "output_tokens": usage["completion_tokens"],
    }
    assert ("billed_units" in body["meta"]) is (backend == "cohere")
    assert fake_upstream.requests_to(ROUTES[backend])
    [row] = wait_for_logs(1, project=project)
    assert (row.endpoint, row.status_code, row.model) == ("rerank", 200, MODELS[backend])
    assert (row.rerank_tokens, row.prompt_tokens, row.embedding_tokens) == (usage["total_tokens"], 0, 0)
    assert row.tokens_estimated is False
    assert (row.cost_micros, row.cost_source) == (expected_micros(backend, usage), "price_table")
    assert row.cost_micros > 0


def test_voyage_tokens_are_the_ones_it_reports(v1, project, project_key, fake_upstream, falcon_store):
    rerank_with(falcon_store, make_connection(fake_upstream, "voyage"), "voyage")
    price("voyage")

    usage = rerank(v1(project_key), "rerank-2.5").json()["usage"]

    words = len(QUERY.split()) + sum(len(document.split()) for document in DOCUMENTS)
    assert usage == {"prompt_tokens": words, "completion_tokens": 0, "total_tokens": words}
    [row] = wait_for_logs(1, project=project)
    assert row.cost_micros == words * 120


def test_an_llm_rerank_scores_one_minus_rank_over_n(v1, project_key, fake_upstream, falcon_store):
    rerank_with(falcon_store, make_connection(fake_upstream, "llm"), "llm")
    fake_upstream.configure("openai.chat", answer="[2, 3]")

    body = rerank(v1(project_key), "gpt-4.1-mini").json()

    assert body["results"] == [{"index": 1, "relevance_score": 1.0}, {"index": 2, "relevance_score": 1 - 1 / 3}]


def test_unreported_tokens_are_estimated_over_the_passages_as_sent(
    v1, project, project_key, fake_upstream, falcon_store
):
    from gateway.connections.providers.embeddings import estimate_tokens

    rerank_with(falcon_store, make_connection(fake_upstream, "cohere"), "cohere")
    fake_upstream.configure("cohere.rerank", omit_usage=True)
    long_document = "x" * 6000

    usage = rerank(v1(project_key), "rerank-v3.5", documents=[long_document, "short"]).json()["usage"]

    sent = fake_upstream.requests_to("cohere.rerank")[0].json()["documents"]
    assert [len(document) for document in sent] == [4000, 5]
    assert usage["prompt_tokens"] == estimate_tokens([QUERY, *sent])
    [row] = wait_for_logs(1, project=project)
    assert row.tokens_estimated is True
    assert row.rerank_tokens == usage["total_tokens"]


def test_a_reranker_without_a_price_costs_nothing_and_still_answers(
    v1, project, project_key, fake_upstream, falcon_store
):
    from gateway.connections.models import ModelPrice

    rerank_with(falcon_store, make_connection(fake_upstream, "voyage"), "voyage")
    ModelPrice.objects.filter(provider_type="voyage_rerank").delete()

    response = rerank(v1(project_key), "voyage-reranker")

    assert response.status_code == 200, response.text
    [row] = wait_for_logs(1, project=project)
    assert (row.cost_micros, row.cost_source) == (0, "unpriced")
    assert row.rerank_tokens > 0


def test_the_store_connection_answers_to_its_name_and_its_model_only(v1, project_key, fake_upstream, falcon_store):
    rerank_with(falcon_store, make_connection(fake_upstream, "cohere"), "cohere")
    client = v1(project_key)

    assert rerank(client, "cohere-reranker").status_code == 200
    assert rerank(client, "rerank-v3.5").status_code == 200
    for other in ("rerank-v3", "gpt-4o-mini", "fake-chat", "text-embedding-3-small"):
        response = rerank(client, other)
        assert response.status_code == 404, other
        assert response.json()["error"]["code"] == "model_not_found"


def test_a_store_without_a_rerank_connection_has_no_rerank_model(v1, project, project_key, fake_upstream, falcon_store):
    from gateway.connections.services import connection_delete

    connection = make_connection(fake_upstream, "cohere")
    rerank_with(falcon_store, connection, "cohere")
    connection_delete(connection=connection)  # SET_NULL: the store keeps no rerank connection

    response = rerank(v1(project_key), "rerank-v3.5")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"
    [row] = wait_for_logs(1, project=project)
    assert (row.endpoint, row.status_code, row.cost_micros) == ("rerank", 404, 0)
    assert not fake_upstream.requests_to("cohere.rerank")


def test_an_upstream_failure_is_answered_in_the_envelope_and_logged(
    v1, project, project_key, fake_upstream, falcon_store
):
    rerank_with(falcon_store, make_connection(fake_upstream, "voyage"), "voyage")
    fake_upstream.configure("voyage.rerank", status=500)

    response = rerank(v1(project_key), "rerank-2.5")

    assert response.status_code == 500, response.text
    assert set(response.json()["error"]) == {"message", "type", "code"}
    [row] = wait_for_logs(1, project=project)
    assert (row.endpoint, row.status_code, row.rerank_tokens, row.cost_micros) == ("rerank", 500, 0, 0)


def test_at_most_a_thousand_documents_each_cut_as_the_backend_cuts_it(v1, project_key, fake_upstream, falcon_store):
    rerank_with(falcon_store, make_connection(fake_upstream, "llm"), "llm")
    client = v1(project_key)

    refused = rerank(client, "gpt-4.1-mini", documents=["d"] * 1001)
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "invalid_request"
    assert "1000" in refused.json()["error"]["message"]

    answered = rerank(client, "gpt-4.1-mini", documents=["z" * 900] * 1000, top_n=3)
    assert answered.status_code == 200, answered.text
    assert len(answered.json()["results"]) == 3
    prompt = fake_upstream.requests_to("openai.chat")[0].json()["messages"][1]["content"]
    assert prompt.count("[1000] ") == 1 and "z" * 801 not in prompt and "z" * 800 in prompt


BAD_BODIES = {
    "no model": {"query": QUERY, "documents": DOCUMENTS},
    "model not a string": {"model": ["rerank-v3.5"], "query": QUERY, "documents": DOCUMENTS},
    "no query": {"model": "rerank-v3.5", "documents": DOCUMENTS},
    "blank query": {"model": "rerank-v3.5", "query": "", "documents": DOCUMENTS},
    "query too long": {"model": "rerank-v3.5", "query": "q" * 4001, "documents": DOCUMENTS},
    "NUL in the query": {"model": "rerank-v3.5", "query": "bad\x00query", "documents": DOCUMENTS},
    "no documents": {"model": "rerank-v3.5", "query": QUERY, "documents": []},
    "documents not a list": {"model": "rerank-v3.5", "query": QUERY, "documents": "alpha"},
    "a document not a string": {"model": "rerank-v3.5", "query": QUERY, "documents": ["alpha", {"text": "b"}]},
    "a null document": {"model": "rerank-v3.5", "query": QUERY, "documents": ["alpha", None]},
    "NUL in a document": {"model": "rerank-v3.5", "query": QUERY, "documents": ["bad\x00text"]},
    "top_n zero": {"model": "rerank-v3.5", "query": QUERY, "documents": DOCUMENTS, "top_n": 0},
    "top_n huge": {"model": "rerank-v3.5", "query": QUERY, "documents": DOCUMENTS, "top_n": 10**30},
    "top_n not a number": {"model": "rerank-v3.5", "query": QUERY, "documents": DOCUMENTS, "top_n": "many"},
    "top_n a list": {"model": "rerank-v3.5", "query": QUERY, "documents": DOCUMENTS, "top_n": [2]},
}


def test_hostile_bodies_are_refused_in_the_envelope(v1, project_key, fake_upstream, falcon_store):
    rerank_with(falcon_store, make_connection(fake_upstream, "cohere"), "cohere")
    client = v1(project_key)

    for label, body in BAD_BODIES.items():
        response = client.post("/rerank", json=body)
        assert response.status_code == 400, f"{label}: {response.status_code} {response.text[:200]}"
        error = response.json()["error"]
        assert error["code"] in {"invalid_request", "invalid_json"} and error["message"], label
    assert client.post("/rerank", content=b"[1, 2]").status_code == 400
    assert not fake_upstream.requests_to("cohere.rerank")


def test_top_n_past_the_documents_ranks_them_all(v1, project_key, fake_upstream, falcon_store):
    rerank_with(falcon_store, make_connection(fake_upstream, "cohere"), "cohere")

    body = rerank(v1(project_key), "rerank-v3.5", top_n=50).json()

    assert [result["index"] for result in body["results"]] == [2, 1, 0]
    assert fake_upstream.requests_to("cohere.rerank")[0].json()["top_n"] == 3


# -- who may call it ---------------------------------------------------------------------------


def test_keys_are_checked_before_anything_is_ranked(v1, project, fake_upstream, falcon_store):
    from django.utils import timezone

    from gateway.clients.models import GatewayKey
    from gateway.clients.services import key_create, project_create

    rerank_with(falcon_store, make_connection(fake_upstream, "cohere"), "cohere")
    chat_only = key_create(project=project, name="chat only", scopes=["chat", "retrieve"], expires_at=None).key
    rerank_only = key_create(project=project, name="rerank only", scopes=["rerank"], expires_at=None)
    revoked = key_create(project=project, name="revoked", scopes=None, expires_at=None)
    GatewayKey.objects.filter(pk=revoked.api_key.pk).update(revoked_at=timezone.now())
    # A project of its own, without the store: the falcon store's connection is not its model.
    outsider_project = project_create(
        name="outsider",
        chat_connection_id=project.chat_connection_id,
        embedding_connection_id=None,
        store_id=None,
        system_prompt="",
    )
    outsider = key_create(project=outsider_project, name="outsider", scopes=None, expires_at=None).key

    expectations = [
        (None, 401, "missing_api_key"),
        ("sk-proj-not-a-key", 401, "invalid_api_key"),
        (revoked.key, 401, "key_revoked"),
        (chat_only, 403, "insufficient_scope"),
        (outsider, 404, "model_not_found"),
    ]
    for key, status, code in expectations:
        response = rerank(v1(key), "rerank-v3.5")
        assert (response.status_code, response.json()["error"]["code"]) == (status, code), key
    assert not fake_upstream.requests_to("cohere.rerank")
    assert rerank(v1(rerank_only.key), "rerank-v3.5").status_code == 200
    assert v1(rerank_only.key).post("/chat/completions", json={"messages": []}).status_code == 403


def test_only_post_is_served(v1, project_key):
    response = v1(project_key).get("/rerank")
    assert response.status_code == 405
    assert response.headers["Allow"] == "POST"


# -- rerank routes -----------------------------------------------------------------------------


@pytest.fixture
def rerank_route(project, fake_upstream):
    """A rerank route the project allows: Cohere first, then Voyage, then a chat model."""
    from tests.factories import RouteFactory, RouteTargetFactory

    route = RouteFactory(name="team-reranker", kind="rerank")
    for backend in ("cohere", "voyage", "llm"):
        RouteTargetFactory(route=route, connection=make_connection(fake_upstream, backend, name=f"route-{backend}"))
        price(backend)
    project.allowed_routes.add(route)
    return route


def test_a_rerank_route_fails_over_and_is_priced_by_the_target_that_answered(
    v1, project, project_key, fake_upstream, rerank_route
):
    fake_upstream.configure("cohere.rerank", status=503)

    response = rerank(v1(project_key), "team-reranker", top_n=2)

    assert response.status_code == 200, response.text
    assert [result["index"] for result in response.json()["results"]] == [2, 1]
    usage = response.json()["usage"]
    [row] = wait_for_logs(1, project=project)
    assert (row.endpoint, row.route_name, row.target, row.model) == (
        "rerank",
        "team-reranker",
        "route-voyage",
        "rerank-2.5",
    )
    assert [(attempt["target"], attempt["outcome"]) for attempt in row.attempts] == [
        ("route-cohere", "http_5xx"),
        ("route-voyage", "ok"),
    ]
    assert row.cost_micros == expected_micros("voyage", usage) > 0


def test_a_route_target_may_be_a_chat_model(v1, project, project_key, fake_upstream, rerank_route):
    fake_upstream.configure("cohere.rerank", status=500)
    fake_upstream.configure("voyage.rerank", status=429)

    body = rerank(v1(project_key), "team-reranker").json()

    assert [result["index"] for result in body["results"]] == [2, 1, 0]
    assert [result["relevance_score"] for result in body["results"]] == [1, pytest.approx(2 / 3), pytest.approx(1 / 3)]
    [row] = wait_for_logs(1, project=project)
    assert (row.target, row.model) == ("route-llm", "gpt-4.1-mini")
    assert row.cost_micros == expected_micros("llm", body["usage"]) > 0


def test_a_route_the_project_does_not_allow_is_no_model(v1, project, project_key, rerank_route):
    project.allowed_routes.remove(rerank_route)

    response = rerank(v1(project_key), "team-reranker")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"


def test_a_chat_route_is_no_rerank_model(v1, project, project_key, fake_upstream):
    from tests.factories import RouteFactory, RouteTargetFactory

    route = RouteFactory(name="chatty", kind="chat")
    RouteTargetFactory(route=route, connection=project.chat_connection)
    project.allowed_routes.add(route)

    assert rerank(v1(project_key), "chatty").status_code == 404


# -- spend control -----------------------------------------------------------------------------


def test_a_dollar_budget_counts_rerank_spend(v1, project, project_key, fake_upstream, falcon_store):
    from gateway.clients.models import Project

    rerank_with(falcon_store, make_connection(fake_upstream, "cohere"), "cohere")
    price("cohere")
    # One Cohere search costs 2,500 micro-dollars: the first call passes, the second finds the
    # budget spent.
    Project.objects.filter(pk=project.pk).update(budget_daily_usd_micros=2000)
    client = v1(project_key)

    assert rerank(client, "rerank-v3.5").status_code == 200
    wait_for_logs(1, project=project)
    refused = rerank(client, "rerank-v3.5")

    assert refused.status_code == 429, refused.text
    assert len(fake_upstream.requests_to("cohere.rerank")) == 1


def test_the_stores_rerank_route_answers_to_its_name(v1, project, project_key, fake_upstream, falcon_store):
    from stores.models import RagStore
    from tests.factories import RouteFactory, RouteTargetFactory

    route = RouteFactory(name="store-reranker", kind="rerank")
    for backend in ("cohere", "voyage"):
        RouteTargetFactory(route=route, connection=make_connection(fake_upstream, backend, name=f"store-{backend}"))
    RagStore.objects.filter(pk=falcon_store.pk).update(rerank_route=route, rerank_backend="cohere")
    fake_upstream.configure("cohere.rerank", status=500)

    response = rerank(v1(project_key), "store-reranker", top_n=2)

    assert response.status_code == 200, response.text  # the project allows no route: the store's is its own
    assert [result["index"] for result in response.json()["results"]] == [2, 1]
    [row] = wait_for_logs(1, project=project)
    assert (row.route_name, row.target) == ("store-reranker", "store-voyage")
    assert rerank(v1(project_key), "team-reranker").status_code == 404
    assert "store-reranker" in [model["id"] for model in v1(project_key).get("/models").json()["data"]]
