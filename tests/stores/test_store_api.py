import pytest

from gateway.connections.services import connection_create
from stores import rebuild
from stores.models import RagStore


def create_store(admin, connection, **overrides):
    response = admin.post(
        "/admin/api/rag-stores", json={"name": "handbook", "embedding_connection_id": connection.id, **overrides}
    )
    assert response.status_code == 201, response.text
    return response.json()


def test_a_new_store_gets_every_default(api, fake_connection):
    store = create_store(api("admin"), fake_connection)
    expected = {
        "chunk_size": 1000,
        "chunk_overlap": 200,
        "chunking_strategy": "section",
        "contextual_chunks": True,
        "top_k": 5,
        "search_mode": "hybrid",
        "search_backend": "bm25",
        "fts_config": "simple",
        "index_config": "english",
        "fusion_weights": {"vector": 1.0, "lexical": 1.0},
        "fusion": "scores",
        "typo_tolerance": False,
        "rerank": False,
        "rerank_backend": "llm",
        "rerank_connection_id": None,
        "rerank_route_id": None,
        "rerank_candidates": 15,
        "max_distance": 0.0,
        "max_documents": 0,
        "max_bytes": 0,
        "ocr": True,
        "ocr_language": "eng",
        "dimensions": None,
        "document_count": 0,
        "chunk_count": 0,
        "bytes_used": 0,
    }
    assert {k: store[k] for k in expected} == expected


def test_zero_means_the_default_for_sizes(api, fake_connection):
    store = create_store(api("admin"), fake_connection, chunk_size=0, top_k=0, rerank_candidates=0)
    assert (store["chunk_size"], store["top_k"], store["rerank_candidates"]) == (1000, 5, 15)


def test_chunking_strategy_aliases_are_accepted(api, fake_connection):
    assert create_store(api("admin"), fake_connection, chunking_strategy="Chars")["chunking_strategy"] == "character"


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"chunk_size": 100}, "chunk_size", "between 200 and 20000"),
        ({"chunk_size": 20001}, "chunk_size", "20000"),
        ({"chunk_size": 500, "chunk_overlap": 500}, "chunk_overlap", "chunk_overlap must be smaller than chunk_size"),
        ({"top_k": 51}, "top_k", "50"),
        ({"rerank_candidates": 101}, "rerank_candidates", "100"),
        ({"max_distance": 2.5}, "max_distance", "2"),
        ({"max_documents": -1}, "max_documents", "0"),
        ({"search_mode": "fuzzy"}, "search_mode", "fuzzy"),
        ({"search_backend": "elastic"}, "search_backend", "elastic"),
        ({"chunking_strategy": "lines"}, "chunking_strategy", 'unknown chunking strategy "lines"'),
        ({"fts_config": "klingon"}, "fts_config", 'fts_config "klingon" is not a text search configuration'),
        ({"index_config": "klingon"}, "index_config", 'index_config "klingon" is not a text search configuration'),
        ({"search_backend": "pg_search"}, "search_backend", "pg_search extension (ParadeDB) is not installed"),
        ({"fusion_weights": {"vector": 0, "lexical": 0}}, "fusion_weights", "cannot both be 0"),
        ({"fusion": "rank"}, "fusion", "valid are scores, rrf"),
        ({"rerank": True, "rerank_backend": "cohere"}, "rerank_connection_id", "required with the cohere backend"),
        ({"rerank_backend": "bge"}, "rerank_backend", "bge"),
        ({"fusion_weights": {"vector": 1}}, "fusion_weights.lexical", "required"),
        ({"ocr_language": "eng; rm -rf /"}, "ocr_language", "Tesseract language codes joined by +"),
        ({"ocr_language": "x" * 64}, "ocr_language", "63"),
        ({"ocr": "sometimes"}, "ocr", "valid boolean"),
    ],
)
def test_settings_out_of_range_are_400_naming_the_field(api, fake_connection, overrides, field, message):
    response = api("admin").post(
        "/admin/api/rag-stores", json={"name": "kb", "embedding_connection_id": fake_connection.id, **overrides}
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert field in error["fields"], error
    assert message in error["message"]


def test_a_chat_only_connection_cannot_embed(api):
    claude = connection_create(
        name="claude",
        provider_type="anthropic",
        base_url="",
        model_name="claude-sonnet-4-5",
        dimensions=None,
        api_key="k",
    )
    response = api("admin").post("/admin/api/rag-stores", json={"name": "kb", "embedding_connection_id": claude.id})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == 'the anthropic connection "claude" cannot embed'


def test_a_rerank_connection_must_fit_the_backend(api, fake_connection):
    response = api("admin").post(
        "/admin/api/rag-stores",
        json={
            "name": "kb",
            "embedding_connection_id": fake_connection.id,
            "rerank_backend": "voyage",
            "rerank_connection_id": fake_connection.id,
        },
    )
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        'the openai connection "fake-openai" cannot rerank with the voyage backend'
    )


def test_reranking_saves_with_a_fitting_connection_per_backend(api, fake_connection, rerank_connection):
    cohere = rerank_connection("cohere_rerank")
    client = api("admin")
    store = create_store(client, fake_connection, rerank=True, rerank_backend="cohere", rerank_connection_id=cohere.id)
    assert (store["rerank"], store["rerank_backend"], store["rerank_connection_id"]) == (True, "cohere", cohere.id)
    # `llm` may name a chat connection (the one a search outside a project reranks with), or none.
    response = client.patch(
        f"/admin/api/rag-stores/{store['id']}",
        json={"rerank_backend": "llm", "rerank_connection_id": fake_connection.id, "rerank_candidates": 30},
    )
    assert response.status_code == 200, response.text
    assert response.json()["rerank_connection_id"] == fake_connection.id
    response = client.patch(f"/admin/api/rag-stores/{store['id']}", json={"rerank_connection_id": cohere.id})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        'the cohere_rerank connection "cohere" cannot rerank with the llm backend'
    )


@pytest.fixture
def cohere_route(rerank_connection):
    from tests.factories import RouteFactory, RouteTargetFactory

    route = RouteFactory(name="team-reranker", kind="rerank")
    RouteTargetFactory(route=route, connection=rerank_connection("cohere_rerank"))
    return route


def test_a_store_may_rerank_through_a_rerank_route(api, fake_connection, cohere_route):
    store = create_store(
        api("admin"), fake_connection, rerank=True, rerank_backend="cohere", rerank_route_id=cohere_route.id
    )
    assert (store["rerank_route_id"], store["rerank_connection_id"]) == (cohere_route.id, None)
    assert RagStore.objects.get(pk=store["id"]).rerank_route == cohere_route


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"rerank_connection_id": "cohere"}, "set rerank_connection_id or rerank_route_id, not both"),
        ({"rerank_backend": "voyage"}, "route 'team-reranker': the cohere_rerank connection \"cohere\" cannot rerank"),
        ({"rerank_backend": "llm"}, "route 'team-reranker': the cohere_rerank connection \"cohere\" cannot rerank"),
        ({"rerank_route_id": "chat"}, "is a chat route, not a rerank route"),
        ({"rerank_route_id": 987654}, "route 987654 does not exist"),
    ],
)
def test_a_rerank_route_is_refused_unless_it_alone_fits_the_backend(
    api, fake_connection, cohere_route, values, message
):
    from tests.factories import RouteFactory, RouteTargetFactory

    chat_route = RouteFactory(name="chatty", kind="chat")
    RouteTargetFactory(route=chat_route, connection=fake_connection)
    named = {"cohere": cohere_route.targets.get().connection_id, "chat": chat_route.id}
    body = {"rerank_backend": "cohere", "rerank_route_id": cohere_route.id}
    body |= {name: named.get(value, value) for name, value in values.items()}
    response = api("admin").post(
        "/admin/api/rag-stores", json={"name": "kb", "embedding_connection_id": fake_connection.id, **body}
    )
    assert response.status_code == 400, response.text
    assert message in response.json()["error"]["message"]
    assert not RagStore.objects.filter(name="kb").exists()


@pytest.mark.parametrize(("persona", "status"), [("editor", 403), ("viewer", 403), ("outsider", 403), (None, 401)])
def test_only_admins_set_a_rerank_route(api, fake_connection, cohere_route, persona, status):
    store = create_store(api("admin"), fake_connection)
    response = api(persona).patch(f"/admin/api/rag-stores/{store['id']}", json={"rerank_route_id": cohere_route.id})
    assert response.status_code == status
    assert RagStore.objects.get(pk=store["id"]).rerank_route is None


def test_a_model_wider_than_4000_is_refused_when_it_answers(api, fake_connection, fake_upstream):
    fake_upstream.configure("openai.embeddings", width=4096)
    response = api("admin").post(
        "/admin/api/rag-stores", json={"name": "kb", "embedding_connection_id": fake_connection.id}
    )
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert "4096 dimensions" in message and "at most 4000" in message
    assert not RagStore.objects.exists()


def test_an_unreachable_model_still_saves_the_store(api, fake_connection, fake_upstream):
    fake_upstream.configure("openai.embeddings", status=503)
    store = create_store(api("admin"), fake_connection)
    assert store["dimensions"] is None


def test_duplicate_store_names_conflict(api, fake_connection):
    admin = api("admin")
    create_store(admin, fake_connection)
    response = admin.post(
        "/admin/api/rag-stores", json={"name": "handbook", "embedding_connection_id": fake_connection.id}
    )
    assert response.status_code == 409


def test_patch_changes_one_setting_and_put_replaces_all(api, fake_connection):
    admin = api("admin")
    store = create_store(admin, fake_connection, top_k=9, max_distance=0.5)
    patched = admin.patch(f"/admin/api/rag-stores/{store['id']}", json={"top_k": 7}).json()
    assert (patched["top_k"], patched["max_distance"]) == (7, 0.5)
    replaced = admin.put(
        f"/admin/api/rag-stores/{store['id']}", json={"name": "renamed", "embedding_connection_id": fake_connection.id}
    ).json()
    assert (replaced["name"], replaced["top_k"], replaced["max_distance"]) == ("renamed", 5, 0.0)


def test_the_fusion_rule_is_a_setting_read_and_updated_like_the_others(api, fake_connection):
    admin = api("admin")
    store = create_store(admin, fake_connection, fusion="rrf")
    assert store["fusion"] == "rrf"
    patched = admin.patch(f"/admin/api/rag-stores/{store['id']}", json={"fusion": "scores"}).json()
    assert patched["fusion"] == "scores"
    assert admin.get(f"/admin/api/rag-stores/{store['id']}").json()["fusion"] == "scores"


def test_search_backends_lists_all_three(api):
    backends = api("viewer").get("/admin/api/search-backends").json()
    assert [(b["id"], b["available"]) for b in backends] == [("pgvector", True), ("bm25", True), ("pg_search", False)]
    assert "pg_search" in backends[2]["reason"]


def test_deleting_a_store(api, fake_connection):
    admin = api("admin")
    store = create_store(admin, fake_connection)
    assert admin.delete(f"/admin/api/rag-stores/{store['id']}").json() == {"ok": True}
    assert admin.get(f"/admin/api/rag-stores/{store['id']}").status_code == 404


@pytest.mark.parametrize("persona", ["editor", "viewer", "outsider"])
def test_only_admins_write_stores(api, fake_connection, persona):
    store = create_store(api("admin"), fake_connection)
    client = api(persona)
    attempts = [
        client.post("/admin/api/rag-stores", json={"name": "x", "embedding_connection_id": fake_connection.id}),
        client.patch(f"/admin/api/rag-stores/{store['id']}", json={"top_k": 3}),
        client.delete(f"/admin/api/rag-stores/{store['id']}"),
    ]
    assert [r.status_code for r in attempts] == [403, 403, 403]


@pytest.mark.parametrize(("persona", "status"), [("viewer", 200), ("editor", 200), ("outsider", 403), (None, 401)])
def test_who_reads_stores(api, fake_connection, persona, status):
    create_store(api("admin"), fake_connection)
    assert api(persona).get("/admin/api/rag-stores").status_code == status


@pytest.mark.parametrize(
    ("change", "recommended"),
    [
        ({"chunk_size": 1500}, True),
        ({"chunk_overlap": 100}, True),
        ({"contextual_chunks": False}, True),
        ({"chunking_strategy": "words"}, True),
        ({"top_k": 8}, False),
        ({"search_backend": "pgvector"}, False),
        ({"fts_config": "english"}, False),
        ({"index_config": "simple"}, False),
        ({"max_distance": 0.4}, False),
    ],
)
def test_reprocess_is_recommended_only_for_chunk_shaping_changes(api, fake_connection, change, recommended):
    from ingestion.services import IncomingFile, document_upload

    admin = api("admin")
    store = create_store(admin, fake_connection)
    empty = admin.patch(f"/admin/api/rag-stores/{store['id']}", json=change).json()
    assert empty["reprocess_recommended"] is False  # nothing to reprocess yet
    document_upload(store=RagStore.objects.get(pk=store["id"]), files=[IncomingFile(filename="a.txt", data=b"x")])
    admin.put(
        f"/admin/api/rag-stores/{store['id']}", json={"name": "handbook", "embedding_connection_id": fake_connection.id}
    )
    changed = admin.patch(f"/admin/api/rag-stores/{store['id']}", json=change).json()
    assert changed["reprocess_recommended"] is recommended


def test_the_embedding_connection_is_fixed_once_the_store_holds_chunks(api, fake_connection, ingest_now):
    from ingestion.services import IncomingFile, document_upload

    other = connection_create(
        name="other",
        provider_type="openai",
        base_url=fake_connection.base_url,
        model_name="other-model",
        dimensions=None,
        api_key="",
    )
    admin = api("admin")
    store = create_store(admin, fake_connection)
    document_upload(store=RagStore.objects.get(pk=store["id"]), files=[IncomingFile(filename="a.txt", data=b"text")])
    ingest_now()
    response = admin.patch(f"/admin/api/rag-stores/{store['id']}", json={"embedding_connection_id": other.id})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "embedding_connection_locked"


@pytest.mark.parametrize("weights", [{"vector": 1}, {"lexical": 2}])
def test_a_partial_fusion_weights_update_is_refused_and_the_store_keeps_working(api, fake_connection, weights):
    store = create_store(api("admin"), fake_connection)

    response = api("admin").patch(f"/admin/api/rag-stores/{store['id']}", json={"fusion_weights": weights})

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_error"
    assert api("admin").get(f"/admin/api/rag-stores/{store['id']}").json()["fusion_weights"] == {
        "vector": 1.0,
        "lexical": 1.0,
    }
    search = api("viewer").post(f"/admin/api/rag-stores/{store['id']}/search", json={"query": "anything"})
    assert search.status_code == 200


@pytest.mark.parametrize(("persona", "status"), [("viewer", 200), ("outsider", 403), (None, 401)])
def test_text_search_configs_lists_what_the_server_has(api, persona, status):
    response = api(persona).get("/admin/api/text-search-configs")
    assert response.status_code == status
    if status == 200:
        names = [config["name"] for config in response.json()]
        assert {"simple", "english", "german"} <= set(names) and names == sorted(names)


def test_index_config_is_validated_and_its_change_shows_a_rebuild(api, fake_connection):
    admin = api("admin")
    store = create_store(admin, fake_connection)
    assert store["index_config"] == "english"
    assert store["lexical_index"] == {
        "config": "english",
        "target_config": "english",
        "state": "ready",
        "chunks_done": None,
        "chunks_total": None,
    }
    changed = admin.patch(f"/admin/api/rag-stores/{store['id']}", json={"index_config": " Simple "}).json()
    assert changed["index_config"] == "simple" and changed["reprocess_recommended"] is False
    assert (changed["lexical_index"]["state"], changed["lexical_index"]["target_config"]) == ("rebuilding", "simple")
    rebuild.lexical_index_rebuild(store_id=store["id"])
    shown = admin.get(f"/admin/api/rag-stores/{store['id']}").json()["lexical_index"]
    assert (shown["state"], shown["config"]) == ("ready", "simple")


def test_the_deployment_sets_the_index_language_of_new_stores(api, fake_connection, settings):
    settings.DEFAULT_INDEX_CONFIG = "german"
    store = create_store(api("admin"), fake_connection)
    assert store["index_config"] == "german"
    assert (store["lexical_index"]["config"], store["lexical_index"]["state"]) == ("german", "ready")


def test_a_store_created_with_an_index_config_starts_ready(api, fake_connection):
    store = create_store(api("admin"), fake_connection, index_config="german")
    assert (store["lexical_index"]["config"], store["lexical_index"]["state"]) == ("german", "ready")


def test_an_index_language_change_is_saved_while_redis_is_unreachable(
    api, fake_connection, transactional_db, redis_unreachable, caplog
):
    admin = api("admin")
    store = create_store(admin, fake_connection)
    changed = admin.patch(f"/admin/api/rag-stores/{store['id']}", json={"index_config": "simple"})
    assert changed.status_code == 200
    assert changed.json()["lexical_index"]["state"] == "rebuilding"
    assert "stores.rebuild_lexical_index not sent" in caplog.text
    # What the scheduler's sweep (stores.sweep_lexical_indexes) starts a rebuild for.
    assert rebuild.stores_needing_rebuild() == [store["id"]]
