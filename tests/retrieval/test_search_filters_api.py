"""`filters` on the admin search endpoint (the dashboard's search and its compare): every role
that may search filters, the filter applies before top_k, and a hostile filter is a 400 naming
the field."""

import json

import pytest

from ingestion.services import IncomingFile, document_upload
from stores.services import store_create


@pytest.fixture
def store(fake_connection, ingest_now):
    created = store_create(name="kb", values={"embedding_connection_id": fake_connection.id, "top_k": 3})
    files = [
        IncomingFile(
            filename=f"{customer}-{n}.txt",
            data=f"return policy {customer} {n}".encode(),
            attributes={"customer": customer, "year": 2020 + n},
            tags=(customer,),
        )
        for customer in ("acme", "globex")
        for n in range(5)
    ]
    assert document_upload(store=created, files=files).refusal is None
    ingest_now()
    return created


def search(client, store, **body):
    return client.post(f"/admin/api/rag-stores/{store.pk}/search", json={"query": "return policy", **body})


@pytest.mark.parametrize("persona", ["admin", "editor", "viewer"])
@pytest.mark.parametrize(
    ("mode", "backend"), [("vector", "bm25"), ("lexical", "bm25"), ("lexical", "pgvector"), ("hybrid", "bm25")]
)
def test_every_role_searches_with_filters_in_every_mode(api, store, persona, mode, backend):
    filters = {
        "type": "and",
        "filters": [
            {"type": "eq", "key": "customer", "value": "globex"},
            {"type": "gte", "key": "year", "value": 2022},
        ],
    }
    response = search(api(persona), store, filters=filters, mode=mode, backend=backend, top_k=10)
    assert response.status_code == 200, response.text
    hits = response.json()["hits"]
    assert sorted(hit["filename"] for hit in hits) == ["globex-2.txt", "globex-3.txt", "globex-4.txt"]
    assert all(hit["attributes"]["customer"] == "globex" for hit in hits)


def test_a_selective_filter_still_fills_top_k(api, store):
    hits = search(api("viewer"), store, filters={"type": "in", "key": "tags", "value": ["acme"]}).json()["hits"]
    assert len(hits) == 3 and all(hit["filename"].startswith("acme-") for hit in hits)


@pytest.mark.parametrize(("persona", "status"), [("outsider", 403), (None, 401)])
def test_others_cannot_search(api, store, persona, status):
    response = search(api(persona), store, filters={"type": "eq", "key": "customer", "value": "acme"})
    assert response.status_code == status


def deep(depth):
    node = {"type": "eq", "key": "customer", "value": "acme"}
    for _ in range(depth):
        node = {"type": "or", "filters": [node]}
    return node


@pytest.mark.parametrize(
    "filters",
    [
        "customer = acme",
        [],
        None,
        {"type": "eq", "key": "customer", "value": {"$ne": 1}},
        {"type": "eq", "key": ["customer"], "value": "acme"},
        {"type": "eq", "key": "customer", "value": "ac\x00me"},
        {"type": "in", "key": "customer", "value": ["acme"] * 101},
        {"type": "lt", "key": "year", "value": False},
        {"type": "and", "filters": [{"type": "eq", "key": "customer", "value": "acme"}] * 65},
        deep(6),
        deep(20),
    ],
)
def test_hostile_filters_are_a_400_naming_the_field(api, store, filters):
    response = search(api("viewer"), store, filters=filters)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert "filters" in error["fields"], json.dumps(error)


def test_a_filter_nested_past_any_parser_is_a_400(api, store):
    depth = 5000
    leaf = '{"type": "eq", "key": "customer", "value": "acme"}'
    body = '{"query": "return policy", "filters": ' + '{"type": "or", "filters": [' * depth + leaf + "]}" * depth + "}"
    response = api("viewer").post(
        f"/admin/api/rag-stores/{store.pk}/search", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400, response.text
