"""The rerank step and its fallback contract, through the search endpoint, against the fake
Cohere, Voyage and OpenAI-format upstreams (nothing of ours is patched)."""

from __future__ import annotations

import re

import pytest
from prometheus_client import REGISTRY

from gateway.connections.services import connection_delete
from ingestion.services import IncomingFile, document_upload
from retrieval.rerank import apply_rerank_order
from stores.services import store_create, store_update

TOP_K = 3


# -- the pure part -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("order", "expected"),
    [
        ([2, 1, 0], ["c", "b", "a", "d"]),
        ([3], ["d", "a", "b", "c"]),
        ([1, 1, 9, -1, 3], ["b", "d", "a", "c"]),
        ([], ["a", "b", "c", "d"]),
    ],
)
def test_apply_rerank_order_appends_what_the_reranker_left_out_in_fused_order(order, expected):
    assert apply_rerank_order(["a", "b", "c", "d"], order) == expected


# -- through the search endpoint -----------------------------------------------------------


@pytest.fixture
def store(fake_connection, ingest_now):
    created = store_create(name="kb", values={"embedding_connection_id": fake_connection.id, "top_k": TOP_K})
    files = [IncomingFile(filename=f"{n}.txt", data=f"alpha document number {n}".encode()) for n in range(30)]
    files.append(IncomingFile(filename="guide.md", data=b"# Guide\n\n## Returns\n\nThe return policy lasts 30 days."))
    assert document_upload(store=created, files=files).refusal is None
    ingest_now()
    return created


@pytest.fixture
def cohere(rerank_connection):
    return rerank_connection("cohere_rerank")


def search(client, store, **body):
    response = client.post(f"/admin/api/rag-stores/{store.pk}/search", json={"query": "alpha document", **body})
    assert response.status_code == 200, response.text
    return response.json()


def ids(body) -> list[int]:
    return [hit["chunk_id"] for hit in body["hits"]]


def contents(body) -> list[str]:
    return [hit["content"] for hit in body["hits"]]


def sent_pool(fake_upstream, route: str) -> list[str]:
    """The passages the reranker was sent, in fused order (the pool a rerank reorders)."""
    sent = fake_upstream.requests_to(route)[-1].json()
    if route == "openai.chat":
        return re.findall(r"^\[\d+\] (.*)$", sent["messages"][-1]["content"], re.MULTILINE)
    return sent["documents"]


def unreranked(client, store, **body):
    """The same search with the same candidates, skipped: a backend the connection cannot serve."""
    body = search(client, store, **body)
    assert body["rerank_skipped"] is True
    return body


def rerank_on(store, connection, backend="cohere", **values):
    return store_update(
        store=store,
        name=store.name,
        values={"rerank": True, "rerank_backend": backend, "rerank_connection_id": connection.pk, **values},
    ).store


def failures(backend: str, reason: str) -> float:
    labels = {"backend": backend, "reason": reason}
    return REGISTRY.get_sample_value("ragmux_rag_rerank_failures_total", labels) or 0.0


def rerank_seconds_count(backend: str) -> float:
    return REGISTRY.get_sample_value("ragmux_rag_rerank_duration_seconds_count", {"backend": backend}) or 0.0


def test_a_plain_search_reports_reranking_off(api, store):
    body = search(api("viewer"), store)
    assert body["reranked"] is False and body["rerank_fallback"] is False
    assert body["rerank_latency_ms"] is None
    assert body["rerank_skipped"] is False
    assert all("rerank_score" not in hit for hit in body["hits"])


def test_the_reranker_reorders_the_pool_before_the_cut_to_top_k(api, store, cohere, fake_upstream):
    before = rerank_seconds_count("cohere")
    body = search(api("viewer"), rerank_on(store, cohere))
    pool = sent_pool(fake_upstream, "cohere.rerank")
    assert len(pool) == 15  # rerank_candidates, the default
    assert contents(body) == list(reversed(pool))[:TOP_K]  # the fake ranks them in reverse
    assert (body["reranked"], body["rerank_fallback"], body["rerank_backend"]) == (True, False, "cohere")
    assert body["rerank_latency_ms"] >= 0 and body["rerank_skipped"] is False
    assert [hit["rerank_score"] for hit in body["hits"]] == [0.99, 0.98, 0.97]
    assert fake_upstream.requests_to("cohere.rerank")[0].json()["top_n"] == TOP_K
    assert rerank_seconds_count("cohere") == before + 1


def test_candidates_follow_rerank_candidates(api, store, cohere, fake_upstream):
    client = api("viewer")
    body = search(client, rerank_on(store, cohere, rerank_candidates=20))
    pool = sent_pool(fake_upstream, "cohere.rerank")
    assert len(pool) == 20
    assert contents(body) == list(reversed(pool))[:TOP_K]
    assert contents(unreranked(client, store, rerank_backend="voyage")) == pool[:TOP_K]


def test_passages_the_reranker_omits_follow_in_fused_order(api, store, cohere, fake_upstream):
    fake_upstream.configure("cohere.rerank", rerank_results=[4])
    body = search(api("viewer"), rerank_on(store, cohere))
    pool = sent_pool(fake_upstream, "cohere.rerank")
    assert contents(body) == [pool[4], pool[0], pool[1]]
    assert body["reranked"] is True


@pytest.mark.parametrize(
    ("backend", "route", "fault", "reason"),
    [
        ("cohere", "cohere.rerank", {"latency": 2}, "timeout"),
        ("voyage", "voyage.rerank", {"status": 500}, "upstream"),
        ("llm", "openai.chat", {"answer": "I would rather not say."}, "parse"),
        ("llm", "openai.chat", {"status": 500}, "upstream"),
    ],
)
def test_a_failed_rerank_keeps_the_fused_order_with_the_flags(
    api, store, fake_upstream, fake_connection, rerank_connection, settings, backend, route, fault, reason
):
    settings.RERANK_TIMEOUT = 0.3
    connection = fake_connection if backend == "llm" else rerank_connection(f"{backend}_rerank")
    fake_upstream.configure(route, **fault)
    before = failures(backend, reason)
    body = search(api("viewer"), rerank_on(store, connection, backend=backend))
    assert contents(body) == sent_pool(fake_upstream, route)[:TOP_K]
    assert (body["reranked"], body["rerank_fallback"], body["rerank_skipped"]) == (False, True, False)
    assert isinstance(body["rerank_latency_ms"], int)
    assert failures(backend, reason) == before + 1
    if reason == "timeout":
        assert body["rerank_latency_ms"] >= 300


def test_a_deleted_rerank_connection_is_reported_as_skipped(api, store, cohere):
    client = api("viewer")
    plain = ids(unreranked(client, rerank_on(store, cohere), rerank_backend="voyage"))
    connection_delete(connection=cohere)
    before_failures, before_seconds = failures("cohere", "unavailable"), rerank_seconds_count("cohere")
    body = search(client, store)
    assert ids(body) == plain
    assert (body["reranked"], body["rerank_fallback"], body["rerank_skipped"]) == (False, False, True)
    assert body["rerank_latency_ms"] == 0
    assert "no rerank connection" in body["rerank_skipped_reason"]
    assert failures("cohere", "unavailable") == before_failures + 1
    assert rerank_seconds_count("cohere") == before_seconds + 1  # recorded when skipped too


def test_a_connection_that_cannot_serve_the_backend_is_skipped(api, store, cohere):
    body = search(api("viewer"), rerank_on(store, cohere), rerank_backend="voyage")
    assert (body["reranked"], body["rerank_fallback"], body["rerank_skipped"]) == (False, False, True)
    assert "cannot rerank with the voyage backend" in body["rerank_skipped_reason"]


# -- through a rerank route ------------------------------------------------------------------


def cohere_route(rerank_connection, *, targets: int = 2):
    """A rerank route of Cohere connections (all answered by the fake), tried in order."""
    from gateway.connections.services import connection_create
    from tests.factories import RouteFactory, RouteTargetFactory

    route = RouteFactory(name="kb-reranker", kind="rerank")
    first = rerank_connection("cohere_rerank")
    RouteTargetFactory(route=route, connection=first)
    for n in range(1, targets):
        connection = connection_create(
            name=f"cohere-{n}",
            provider_type="cohere_rerank",
            base_url=first.base_url,
            model_name=first.model_name,
            dimensions=None,
            api_key="sk-rerank-key-0123456789",
        )
        RouteTargetFactory(route=route, connection=connection)
    return route


def rerank_through(store, route, backend="cohere"):
    values = {"rerank": True, "rerank_backend": backend, "rerank_connection_id": None, "rerank_route_id": route.pk}
    return store_update(store=store, name=store.name, values=values).store


def test_a_rerank_route_hands_a_failed_target_over_to_the_next(api, store, fake_upstream, rerank_connection):
    fake_upstream.configure("cohere.rerank", status=500, times=1)
    before = failures("cohere", "upstream")
    body = search(api("viewer"), rerank_through(store, cohere_route(rerank_connection)))
    [first, second] = fake_upstream.requests_to("cohere.rerank")
    assert first.json()["documents"] == second.json()["documents"]
    assert contents(body) == list(reversed(second.json()["documents"]))[:TOP_K]
    assert (body["reranked"], body["rerank_fallback"], body["rerank_skipped"]) == (True, False, False)
    assert failures("cohere", "upstream") == before + 1


def test_a_rerank_route_whose_targets_all_fail_keeps_the_fused_order(api, store, fake_upstream, rerank_connection):
    fake_upstream.configure("cohere.rerank", status=500)
    before = failures("cohere", "upstream")
    body = search(api("viewer"), rerank_through(store, cohere_route(rerank_connection, targets=3)))
    assert fake_upstream.calls("cohere.rerank") == 3
    assert contents(body) == sent_pool(fake_upstream, "cohere.rerank")[:TOP_K]
    assert (body["reranked"], body["rerank_fallback"], body["rerank_skipped"]) == (False, True, False)
    assert isinstance(body["rerank_latency_ms"], int)
    assert failures("cohere", "upstream") == before + 3


def test_a_deleted_rerank_route_is_reported_as_skipped(api, store, fake_upstream, rerank_connection):
    route = cohere_route(rerank_connection)
    rerank_through(store, route)
    route.delete()
    body = search(api("viewer"), store)
    assert (body["reranked"], body["rerank_fallback"], body["rerank_skipped"]) == (False, False, True)
    assert (body["rerank_latency_ms"], fake_upstream.calls("cohere.rerank")) == (0, 0)
    assert "no rerank connection or route" in body["rerank_skipped_reason"]


def test_a_route_that_is_no_longer_a_rerank_route_is_reported_as_skipped(api, store, fake_upstream, rerank_connection):
    route = cohere_route(rerank_connection)
    rerank_through(store, route)
    route.kind = "chat"
    route.save()
    body = search(api("viewer"), store)
    assert (body["reranked"], body["rerank_fallback"], body["rerank_skipped"]) == (False, False, True)
    assert "is a chat route, not a rerank route" in body["rerank_skipped_reason"]
    assert fake_upstream.calls("cohere.rerank") == 0


def test_a_search_may_override_the_route_with_a_connection_and_back(api, store, fake_upstream, rerank_connection):
    route = cohere_route(rerank_connection)
    client = api("viewer")
    voyage = rerank_connection("voyage_rerank")
    through_route = rerank_through(store, route)
    body = search(client, through_route, rerank_backend="voyage", rerank_connection_id=voyage.pk)
    assert body["reranked"] is True and fake_upstream.calls("voyage.rerank") == 1
    values = {"rerank_backend": "voyage", "rerank_route_id": None, "rerank_connection_id": voyage.pk}
    through_voyage = store_update(store=through_route, name=store.name, values=values).store
    body = search(client, through_voyage, rerank_backend="cohere", rerank_route_id=route.pk)
    assert body["reranked"] is True and fake_upstream.calls("cohere.rerank") == 1


def test_fewer_than_two_candidates_are_not_reranked_and_not_a_fallback(api, store, cohere, fake_upstream):
    body = search(api("viewer"), rerank_on(store, cohere), query="policy", mode="lexical")
    assert len(body["hits"]) == 1
    assert (body["reranked"], body["rerank_fallback"]) == (False, False)
    assert body["rerank_latency_ms"] == 0
    assert fake_upstream.calls("cohere.rerank") == 0


def test_overrides_compare_reranked_and_not_side_by_side(api, store, fake_upstream, fake_connection, rerank_connection):
    client = api("viewer")
    voyage = rerank_connection("voyage_rerank")
    plain = search(client, store)
    assert plain["rerank_latency_ms"] is None and plain["reranked"] is False
    with_voyage = search(client, store, rerank=True, rerank_backend="voyage", rerank_connection_id=voyage.pk)
    pool = sent_pool(fake_upstream, "voyage.rerank")
    assert contents(with_voyage) == list(reversed(pool))[:TOP_K]
    assert (with_voyage["reranked"], with_voyage["rerank_backend"]) == (True, "voyage")
    with_llm = search(client, store, rerank=True, rerank_backend="llm", rerank_connection_id=fake_connection.pk)
    assert sent_pool(fake_upstream, "openai.chat") == pool
    assert contents(with_llm) == list(reversed(pool))[:TOP_K]  # the fake model answers in reverse too
    assert (with_llm["reranked"], with_llm["rerank_backend"]) == (True, "llm")
    assert fake_upstream.calls("voyage.rerank") == 1 and fake_upstream.calls("openai.chat") == 1
    store.refresh_from_db()
    assert store.rerank is False  # overrides apply to their call only


def test_without_a_rerank_connection_the_search_says_it_ran_unreranked(api, store):
    body = search(api("viewer"), store, rerank=True, rerank_backend="llm")
    assert (body["reranked"], body["rerank_skipped"], body["rerank_latency_ms"]) == (False, True, 0)


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"rerank_connection_id": 987654}, "rerank_connection_id"),
        ({"rerank_connection_id": "x"}, "rerank_connection_id"),
        ({"rerank_backend": "bge"}, "rerank_backend"),
        ({"rerank_route_id": 987654}, "rerank_route_id"),
        ({"rerank_route_id": 0}, "rerank_route_id"),
        ({"rerank_route_id": 1, "rerank_connection_id": 1}, "rerank_route_id"),
        ({"rerank": "maybe"}, "rerank"),
    ],
)
def test_bad_rerank_overrides_are_refused(api, store, override, field):
    response = api("viewer").post(
        f"/admin/api/rag-stores/{store.pk}/search", json={"query": "alpha", "rerank": True, **override}
    )
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]
