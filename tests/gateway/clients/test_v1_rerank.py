"""A store's rerank in a project's requests: `/v1/retrieve` and a chat's context, with the `llm`
backend asking the project's own chat model (the fake OpenAI upstream ranks in reverse)."""

from __future__ import annotations

import re

import pytest

from ingestion.services import IncomingFile, document_upload
from stores.services import store_update
from tests.helpers import wait_for_logs

QUESTION = "What is the launch code for Project Falcon?"
PASSAGE_LINE = re.compile(r"^\[\d+\] (.*)$", re.MULTILINE)


@pytest.fixture
def reranking_store(falcon_store, ingest_now):
    files = [IncomingFile(f"launch-{n}.txt", f"Launch checklist {n} for Project Falcon.".encode()) for n in range(5)]
    assert document_upload(store=falcon_store, files=files).refusal is None
    ingest_now()
    return store_update(store=falcon_store, name=falcon_store.name, values={"rerank": True, "rerank_backend": "llm"})


def rerank_prompt_passages(fake_upstream) -> list[str]:
    requests = [r.json() for r in fake_upstream.requests_to("openai.chat")]
    (prompt,) = [p for p in requests if "Return only a JSON array" in p["messages"][0]["content"]]
    return PASSAGE_LINE.findall(prompt["messages"][-1]["content"])


def test_retrieve_reranks_with_the_projects_chat_model(v1, project_key, reranking_store, fake_upstream):
    response = v1(project_key).post("/retrieve", json={"query": QUESTION, "top_k": 3})
    assert response.status_code == 200, response.text
    body = response.json()
    pool = rerank_prompt_passages(fake_upstream)
    assert len(pool) == 6  # every chunk of the store is a candidate
    assert [hit["content"] for hit in body["data"]] == list(reversed(pool))[:3]
    assert (body["reranked"], body["rerank_backend"], body["rerank_fallback"]) == (True, "llm", False)
    (rerank_call,) = [r for r in fake_upstream.requests_to("openai.chat")]
    assert rerank_call.json()["model"] == "gpt-4o-mini"  # the project's chat connection


def test_a_chats_context_is_in_reranked_order(v1, project_key, reranking_store, fake_upstream):
    response = v1(project_key).post(
        "/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": QUESTION}]}
    )
    assert response.status_code == 200, response.text
    pool = rerank_prompt_passages(fake_upstream)
    system = fake_upstream.requests_to("openai.chat")[-1].json()["messages"][0]["content"]
    injected = re.findall(r"^\[\d+\] \(.*\)\n(.*)$", system, re.MULTILINE)
    assert injected == list(reversed(pool))[:3]
    assert response.headers["x-ragmux-rag-hits"] == "3"


def test_a_failed_rerank_still_answers_in_fused_order(v1, project_key, reranking_store, fake_upstream):
    fake_upstream.configure("openai.chat", answer="I cannot rank these passages.")
    response = v1(project_key).post("/retrieve", json={"query": QUESTION, "top_k": 3})
    assert response.status_code == 200, response.text
    body = response.json()
    assert [hit["content"] for hit in body["data"]] == rerank_prompt_passages(fake_upstream)[:3]
    assert (body["reranked"], body["rerank_fallback"]) == (False, True)
    assert isinstance(body["rerank_latency_ms"], int)


def test_a_project_chatting_through_a_route_reranks_with_its_first_target(
    v1, project, project_key, reranking_store, chat_connection, fake_upstream
):
    from gateway.clients.services import project_update
    from gateway.connections.route_services import TargetSpec, route_create

    route = route_create(name="falcon-chat", kind="chat", strategy="ordered", targets=[TargetSpec(chat_connection.id)])
    project_update(project=project, chat_route_id=route.id, chat_connection_id=None)

    response = v1(project_key).post("/retrieve", json={"query": QUESTION, "top_k": 3})

    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["reranked"], body["rerank_fallback"], body["rerank_skipped"]) == (True, False, False)
    assert [hit["content"] for hit in body["data"]] == list(reversed(rerank_prompt_passages(fake_upstream)))[:3]


def test_a_client_that_leaves_during_the_rerank_is_charged_the_embedding_and_the_reranks_estimate(
    v1, asgi_url, project, project_key, reranking_store, fake_upstream
):
    from gateway.clients.ledger import flush
    from tests.gateway.clients.test_v1_disconnects import abandon

    fake_upstream.configure("openai.chat", latency=10)
    fake_upstream.forget_requests()

    abandon(
        asgi_url, project_key, "/v1/retrieve", {"query": QUESTION}, once_upstream_has=fake_upstream, route="openai.chat"
    )

    assert fake_upstream.wait_for_disconnects(1), "the rerank went on after the client left"
    [row] = wait_for_logs(1, project=project, status_code=499)
    assert flush(5)
    assert (row.endpoint, row.error) == ("retrieve", "client closed request")
    assert row.embedding_tokens > 0
    assert row.rerank_tokens > 0
    assert row.tokens_estimated


def test_retrieve_reranks_through_the_stores_rerank_route(v1, project_key, reranking_store, fake_upstream):
    from gateway.connections.services import connection_create
    from tests.factories import RouteFactory, RouteTargetFactory

    route = RouteFactory(name="kb-reranker", kind="rerank")
    for name in ("cohere-a", "cohere-b"):
        connection = connection_create(
            name=name,
            provider_type="cohere_rerank",
            base_url=fake_upstream.url,
            model_name="rerank-v3.5",
            dimensions=None,
            api_key="sk-rerank-key-0123456789",
        )
        RouteTargetFactory(route=route, connection=connection)
    values = {"rerank_backend": "cohere", "rerank_route_id": route.pk}
    store_update(store=reranking_store.store, name=reranking_store.store.name, values=values)
    fake_upstream.configure("cohere.rerank", status=500, times=1)

    response = v1(project_key).post("/retrieve", json={"query": QUESTION, "top_k": 3})

    assert response.status_code == 200, response.text
    body = response.json()
    [failed, answered] = fake_upstream.requests_to("cohere.rerank")
    pool = answered.json()["documents"]
    assert failed.json()["documents"] == pool
    assert [hit["content"] for hit in body["data"]] == list(reversed(pool))[:3]
    assert (body["reranked"], body["rerank_backend"], body["rerank_fallback"]) == (True, "cohere", False)


@pytest.fixture
def rerank_upstreams(upstreams, fresh_cooldowns):
    return upstreams[:2]


def rerank_through_a_route(store, upstreams, *, strategy: str, weights: list[int]) -> None:
    """``store`` reranks (`cohere`) through a new rerank route of one target per upstream, in order."""
    from gateway.connections.services import connection_create
    from tests.factories import RouteFactory, RouteTargetFactory

    route = RouteFactory(name=f"kb-{strategy}-reranker", kind="rerank", strategy=strategy)
    for position, (upstream, weight) in enumerate(zip(upstreams, weights, strict=True)):
        connection = connection_create(
            name=f"kb-{strategy}-target-{position}",
            provider_type="cohere_rerank",
            base_url=upstream.url,
            model_name="rerank-v3.5",
            dimensions=None,
            api_key="sk-rerank-key-0123456789",
        )
        RouteTargetFactory(route=route, connection=connection, weight=weight)
    store_update(store=store, name=store.name, values={"rerank_backend": "cohere", "rerank_route_id": route.pk})


def reranked_retrieves(client, times: int) -> None:
    for _ in range(times):
        response = client.post("/retrieve", json={"query": QUESTION, "top_k": 3})
        assert response.status_code == 200, response.text
        assert response.json()["reranked"] is True


def test_a_stores_rerank_route_splits_its_searches_by_the_routes_weights(
    v1, project_key, reranking_store, rerank_upstreams
):
    rerank_through_a_route(reranking_store.store, rerank_upstreams, strategy="weighted", weights=[3, 1])

    reranked_retrieves(v1(project_key), 8)

    assert [upstream.calls("cohere.rerank") for upstream in rerank_upstreams] == [6, 2]


def test_a_failing_target_of_a_stores_rerank_route_cools_down(
    v1, project_key, reranking_store, rerank_upstreams, settings
):
    settings.ROUTE_COOLDOWN_FAILURES, settings.ROUTE_COOLDOWN = 2, 60
    failing, answering = rerank_upstreams
    failing.configure("cohere.rerank", status=500, times=1000)
    rerank_through_a_route(reranking_store.store, rerank_upstreams, strategy="ordered", weights=[1, 1])

    reranked_retrieves(v1(project_key), 6)

    # Its second failure cooled the first target: the four searches after it went to the second alone.
    assert (failing.calls("cohere.rerank"), answering.calls("cohere.rerank")) == (2, 6)


# How a store's rerank ends, what makes it end so, and the row's (outcome, reason).
RERANK_ENDINGS = {
    "reranked": ({}, ("reranked", "")),
    "fallback": (
        {"answer": "I cannot rank these passages."},
        (
            "fallback",
            "fake-chat: the reranking model's answer is not a list of passage numbers: “I cannot rank these passages.”",
        ),
    ),
    "skipped": (
        {"backend": "cohere"},
        ("skipped", "the store has no rerank connection or route (none was set, or it was deleted)"),
    ),
}


@pytest.mark.parametrize("ending", sorted(RERANK_ENDINGS))
def test_the_rerank_outcome_and_why_are_on_the_row_in_the_api_and_in_the_csv(
    v1, api, project, project_key, reranking_store, falcon_store, fake_upstream, ending
):
    import csv
    import io

    knobs, expected = RERANK_ENDINGS[ending]
    if "backend" in knobs:
        from stores.models import RagStore

        RagStore.objects.filter(pk=falcon_store.pk).update(rerank_backend=knobs["backend"])
    else:
        fake_upstream.configure("openai.chat", **knobs)
    assert v1(project_key).post("/retrieve", json={"query": QUESTION, "top_k": 3}).status_code == 200
    [row] = wait_for_logs(1, project=project)
    assert (row.status_code, row.error, row.rerank_outcome, row.rerank_reason) == (200, "", *expected)
    [listed] = api("viewer").get("/admin/api/request-logs").json()["data"]
    assert (listed["rerank_outcome"], listed["rerank_reason"]) == expected
    exported = api("viewer").get("/admin/api/request-logs.csv", headers={"Accept": "text/csv"})
    [line] = csv.DictReader(io.StringIO(exported.text))
    assert (line["rerank_outcome"], line["rerank_reason"]) == expected
