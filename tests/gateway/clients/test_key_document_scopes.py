"""A key scoped to one tenant's documents never receives another tenant's passage: not from
`/v1/retrieve`, not in a chat's grounding context (what the fake upstream received), its sources
headers or `include_context`, and not through a rerank (what the fake reranker received). The
client's own filters narrow the scope and never widen it."""

from __future__ import annotations

import json

import pytest

from gateway.clients.services import key_create
from ingestion.services import IncomingFile, document_upload
from retrieval.filters import parse_filter
from stores.services import store_update

QUESTION = "What is the refund policy for returned hardware?"
ACME = {"type": "eq", "key": "customer", "value": "acme"}


def tenant_document(name: str, customer: str, n: int) -> IncomingFile:
    text = f"Refund policy for returned hardware, {customer} edition {n}: the {customer.upper()}-SECRET-{n} applies."
    return IncomingFile(f"{name}-{n}.txt", text.encode(), attributes={"customer": customer}, tags=(customer,))


@pytest.fixture
def shared_store(falcon_store, ingest_now):
    """One store, two tenants: three documents each, all about the question."""
    files = [tenant_document(customer, customer, n) for customer in ("acme", "globex") for n in range(3)]
    assert document_upload(store=falcon_store, files=files).refusal is None
    ingest_now()
    return falcon_store


@pytest.fixture
def acme_key(project, shared_store) -> str:
    return key_create(project=project, name="acme", scopes=None, expires_at=None, filters=parse_filter(ACME)).key


def retrieve(client, **body):
    response = client.post("/retrieve", json={"query": QUESTION, "top_k": 10, **body})
    assert response.status_code == 200, response.text
    return response.json()["data"]


def test_retrieve_returns_the_scoped_tenants_passages_only(v1, acme_key, project_key):
    everyone = retrieve(v1(project_key))
    assert {hit["attributes"].get("customer") for hit in everyone} >= {"acme", "globex"}  # the store holds both

    scoped = retrieve(v1(acme_key))
    assert len(scoped) == 3  # every acme passage: the filter ran before the top k was cut
    assert all("ACME-SECRET" in hit["content"] for hit in scoped)
    assert all(hit["attributes"] == {"customer": "acme"} for hit in scoped)


@pytest.mark.parametrize(
    "widening",
    [
        {"type": "eq", "key": "customer", "value": "globex"},
        {"type": "ne", "key": "customer", "value": "acme"},
        {"type": "or", "filters": [ACME, {"type": "eq", "key": "customer", "value": "globex"}]},
        {"type": "in", "key": "tags", "value": ["globex"]},
    ],
)
def test_a_clients_filter_cannot_widen_its_keys_scope(v1, acme_key, widening):
    hits = retrieve(v1(acme_key), filters=widening)
    assert all("GLOBEX" not in hit["content"] for hit in hits)


def test_a_clients_filter_narrows_its_keys_scope(v1, acme_key):
    hits = retrieve(v1(acme_key), filters={"type": "eq", "key": "tags", "value": "acme"}, top_k=2)
    assert len(hits) == 2 and all("ACME-SECRET" in hit["content"] for hit in hits)


def test_a_chat_is_grounded_on_the_scoped_tenant_alone(v1, acme_key, fake_upstream):
    response = v1(acme_key).post(
        "/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": QUESTION}], "ragmux": {"include_context": True}},
    )
    assert response.status_code == 200, response.text
    sent = json.dumps(fake_upstream.requests_to("openai.chat")[-1].json())
    assert "ACME-SECRET" in sent and "GLOBEX" not in sent
    sources = json.loads(response.headers["x-ragmux-rag-sources"])
    assert sources and all(source["filename"].startswith("acme-") for source in sources)
    extras = response.json()["ragmux"]
    assert "GLOBEX" not in extras["context"]
    assert all(source["filename"].startswith("acme-") for source in extras["sources"])


def test_a_chats_own_filters_narrow_and_never_widen(v1, acme_key, project_key, fake_upstream):
    globex = {"type": "eq", "key": "customer", "value": "globex"}
    body = {"model": "m", "messages": [{"role": "user", "content": QUESTION}], "ragmux": {"filters": globex}}
    assert v1(project_key).post("/chat/completions", json=body).status_code == 200
    assert "ACME-SECRET" not in json.dumps(fake_upstream.requests_to("openai.chat")[-1].json())

    response = v1(acme_key).post("/chat/completions", json=body)
    assert response.status_code == 200
    assert "GLOBEX" not in json.dumps(fake_upstream.requests_to("openai.chat")[-1].json())
    assert response.headers["x-ragmux-rag-hits"] == "0"


def test_a_streamed_chats_sources_header_holds_the_scoped_tenant_alone(v1, acme_key, fake_upstream):
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": QUESTION}]}
    with v1(acme_key).stream("POST", "/chat/completions", json=body) as response:
        assert response.status_code == 200
        sources = json.loads(response.headers["x-ragmux-rag-sources"])
        response.read()
    assert sources and all(source["filename"].startswith("acme-") for source in sources)
    assert "GLOBEX" not in json.dumps(fake_upstream.requests_to("openai.chat")[-1].json())


def test_a_rerank_sees_the_scoped_tenants_passages_alone(v1, acme_key, shared_store, rerank_connection, fake_upstream):
    connection = rerank_connection("cohere_rerank")
    store_update(
        store=shared_store,
        name=shared_store.name,
        values={"rerank": True, "rerank_backend": "cohere", "rerank_connection_id": connection.pk},
    )
    body = v1(acme_key).post("/retrieve", json={"query": QUESTION, "top_k": 10}).json()
    assert body["reranked"] is True
    reranked = fake_upstream.requests_to("cohere.rerank")[-1].json()
    assert reranked["documents"] and all("GLOBEX" not in document for document in reranked["documents"])
    assert all("ACME-SECRET" in hit["content"] for hit in body["data"])


@pytest.mark.parametrize(
    "filters",
    [
        "customer = acme",
        {"type": "eq", "key": "customer"},
        {"type": "eq", "key": "customer", "value": "a\x00b"},
        {"type": "in", "key": "customer", "value": list(range(1000))},
        {"type": "gt", "key": "year", "value": True},
    ],
)
def test_hostile_filters_are_a_400_in_openais_envelope(v1, project_key, filters):
    retrieve_response = v1(project_key).post("/retrieve", json={"query": QUESTION, "filters": filters})
    chat_response = v1(project_key).post(
        "/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": QUESTION}], "ragmux": {"filters": filters}},
    )
    for response in (retrieve_response, chat_response):
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert "filters" in json.dumps(error)


def test_a_deeply_nested_filter_is_a_400(v1, project_key):
    node = ACME
    for _ in range(200):
        node = {"type": "and", "filters": [node]}
    response = v1(project_key).post("/retrieve", json={"query": QUESTION, "filters": node})
    assert response.status_code == 400, response.text
