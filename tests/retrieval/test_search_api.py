import pytest

from ingestion.services import IncomingFile, document_upload
from stores.services import store_create


@pytest.fixture
def store(fake_connection, ingest_now):
    created = store_create(name="kb", values={"embedding_connection_id": fake_connection.id, "top_k": 2})
    files = [IncomingFile(filename=f"{n}.txt", data=f"alpha document number {n}".encode()) for n in range(60)]
    files.append(IncomingFile(filename="guide.md", data=b"# Guide\n\n## Returns\n\nThe return policy lasts 30 days."))
    assert document_upload(store=created, files=files).refusal is None
    ingest_now()
    return created


def search(client, store, **body):
    return client.post(f"/admin/api/rag-stores/{store.pk}/search", json=body)


def test_the_response_has_the_seed_fields_and_echoes_what_ran(api, store):
    response = search(api("viewer"), store, query="return policy")
    assert response.status_code == 200
    body = response.json()
    assert (body["mode"], body["backend"], body["fts_config"]) == ("hybrid", "bm25", "english")
    assert body["latency_ms"] >= body["retrieval_latency_ms"] >= 0
    assert len(body["hits"]) == 2  # the store's top_k
    fields = {
        "chunk_id",
        "document_id",
        "filename",
        "index",
        "section",
        "page",
        "content",
        "distance",
        "score",
        "vector_rank",
        "fts_rank",
        "source",
        "tags",
        "attributes",
        "matched_terms",
    }
    for hit in search(api("viewer"), store, query="return policy", top_k=10).json()["hits"]:
        if hit["fts_rank"]:
            assert set(hit) == fields | {"lex_score"}
        else:
            assert set(hit) == fields  # a vector-only hit has no lexical score at all
    guide = next(
        h
        for h in body["hits"] + search(api("viewer"), store, query="return policy", top_k=10).json()["hits"]
        if h["filename"] == "guide.md"
    )
    assert (guide["section"], guide["page"], guide["fts_rank"]) == ("Guide > Returns", None, 1)


def test_overrides_apply_to_this_call_only(api, store):
    client = api("viewer")
    body = search(client, store, query="return policy", mode="lexical", backend="pgvector", top_k=1).json()
    assert (body["mode"], body["backend"], len(body["hits"])) == ("lexical", "pgvector", 1)
    assert "lex_score" not in body["hits"][0]
    again = search(client, store, query="return policy").json()
    assert (again["mode"], again["backend"]) == ("hybrid", "bm25")


def test_top_k_is_clamped_to_50(api, store):
    body = search(api("viewer"), store, query="alpha", top_k=500).json()
    assert len(body["hits"]) == 50


def test_weighted_fusion_and_typo_tolerance_are_selectable(api, store):
    body = search(
        api("viewer"), store, query="retrn polcy", typo_tolerance=True, fusion_weights={"vector": 0.5, "lexical": 2}
    ).json()
    assert body["corrections"] == [
        {"original": "retrn", "corrected": "return", "corrected_word": "return", "distance": 1},
        {"original": "polcy", "corrected": "polici", "corrected_word": "policy", "distance": 1},
    ]
    top = body["hits"][0]
    assert top["filename"] == "guide.md"
    # Weights are shares: the lexical side's best (normalised 1) holds 2 of 2.5, whatever the
    # vector side adds (its normalised score, 0–1, times 0.5).
    assert top["fts_rank"] == 1
    assert 2 / 2.5 <= top["score"] <= 1


def rrf_score(hit: dict) -> float:
    """The seed's formula with 1:1 weights: 1/(60 + vector_rank) + 1/(60 + fts_rank)."""
    return sum(1 / (60 + rank) for rank in (hit["vector_rank"], hit["fts_rank"]) if rank)


def test_fusion_rrf_gives_reciprocal_rank_scores_and_scores_gives_0_to_1(api, store):
    client = api("viewer")
    rrf = search(client, store, query="return policy", top_k=10, fusion="rrf").json()["hits"]
    assert [hit["score"] for hit in rrf] == pytest.approx([rrf_score(hit) for hit in rrf])
    assert all(hit["score"] <= 2 / 61 for hit in rrf)

    scores = search(client, store, query="return policy", top_k=10, fusion="scores").json()["hits"]
    assert all(0 <= hit["score"] <= 1 for hit in scores)
    assert scores[0]["score"] > 2 / 61  # far above what rank fusion can give
    assert search(client, store, query="return policy", top_k=10).json()["hits"] == scores  # the default


def test_a_store_set_to_rrf_searches_by_rrf(api, store):
    assert api("admin").patch(f"/admin/api/rag-stores/{store.pk}", json={"fusion": "rrf"}).status_code == 200
    hits = search(api("viewer"), store, query="return policy", top_k=10).json()["hits"]
    assert [hit["score"] for hit in hits] == pytest.approx([rrf_score(hit) for hit in hits])


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"query": ""}, "query"),
        ({"query": "x", "fusion": "rank"}, "fusion"),
        ({"query": "x", "mode": "fuzzy"}, "mode"),
        ({"query": "x", "backend": "elastic"}, "backend"),
        ({"query": "x", "max_distance": 3}, "max_distance"),
        ({"query": "x", "fusion_weights": {"vector": -1, "lexical": 1}}, "fusion_weights.vector"),
    ],
)
def test_invalid_searches_are_400(api, store, body, field):
    response = api("viewer").post(f"/admin/api/rag-stores/{store.pk}/search", json=body)
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]


def test_an_embedding_failure_is_a_502_with_the_reason(api, store, fake_upstream):
    fake_upstream.configure("openai.embeddings", status=401)
    response = search(api("viewer"), store, query="anything")
    assert response.status_code == 502
    assert (
        "embedding the query failed: openai refused the credentials of this gateway's connection (HTTP 401)"
        in (response.json()["error"]["message"])
    )


@pytest.mark.parametrize(
    ("persona", "status"), [("admin", 200), ("editor", 200), ("viewer", 200), ("outsider", 403), (None, 401)]
)
def test_who_may_search(api, store, persona, status):
    assert search(api(persona), store, query="alpha").status_code == status


def test_an_unknown_store_is_404(api):
    assert api("viewer").post("/admin/api/rag-stores/999/search", json={"query": "x"}).status_code == 404


@pytest.mark.parametrize("weights", [{"vector": 0, "lexical": 0}, {"vector": 1}])
def test_fusion_weight_overrides_follow_the_store_settings_rule(api, store, weights):
    response = search(api("viewer"), store, query="return policy", fusion_weights=weights)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_error"
