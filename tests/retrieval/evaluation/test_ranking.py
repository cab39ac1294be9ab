"""A search becoming a document ranking: the pool of chunks, collapsed to documents at their best
chunk, reranked when the options ask for it."""

import pytest

from ingestion.services import IncomingFile, document_upload
from retrieval.evaluation.ranking import pool_options, rank_documents
from retrieval.evaluation.scores import POOL
from retrieval.search import embed_query
from stores.models import Document, RagStore
from stores.services import store_create

pytestmark = pytest.mark.django_db(transaction=True)

LEXICAL = {"mode": "lexical", "backend": "bm25"}


@pytest.fixture
def store(fake_connection, ingest_now) -> RagStore:
    """'long' says "alpha" in each of its chunks, 'short' only that (so it ranks first), each
    filler once among many other words."""
    created = store_create(name="kb", values={"embedding_connection_id": fake_connection.id, "chunk_size": 400})
    sentence = "alpha beta gamma delta epsilon zeta eta theta iota kappa. "
    files = [
        IncomingFile(filename="long.txt", data=(sentence * 40).encode()),
        IncomingFile(filename="short.txt", data=b"alpha alpha alpha", source="S-1"),
        IncomingFile(filename="other.txt", data=b"nothing to see"),
    ]
    files += [IncomingFile(filename=f"filler{n}.txt", data=f"alpha {n} {'filler ' * 60}".encode()) for n in range(60)]
    assert document_upload(store=created, files=files).refusal is None
    ingest_now()
    return RagStore.objects.get(pk=created.pk)


def test_a_ranking_holds_each_document_once_at_its_best_chunk_with_its_source(store):
    long = Document.objects.get(store=store, filename="long.txt")
    short = Document.objects.get(store=store, filename="short.txt")
    assert long.chunks.count() > 1

    ranked = rank_documents(store=store, query="alpha", options=pool_options(store, LEXICAL), query_vector=None)

    # The pool is POOL chunks, whatever top_k the configuration says: long's several chunks
    # collapse to one entry, and documents come back until the chunks run out at POOL.
    assert len(ranked.documents) == len(set(ranked.documents)) > 3
    assert len(ranked.documents) <= POOL
    assert ranked.documents[0] == short.pk and ranked.sources[0] == "S-1"
    assert ranked.documents[1] == long.pk
    assert ranked.sources == list(
        Document.objects.in_bulk(ranked.documents)[document].source for document in ranked.documents
    )
    assert Document.objects.get(store=store, filename="other.txt").pk not in ranked.documents
    assert ranked.rerank is None and ranked.latency_ms > 0


def test_a_given_query_vector_is_searched_without_embedding_the_query_again(store, fake_upstream):
    vector = embed_query(store, "alpha").vectors[0]
    embedded = len(fake_upstream.requests_to("openai.embeddings"))

    given = rank_documents(
        store=store, query="alpha", options=pool_options(store, {"mode": "vector"}), query_vector=vector
    )

    assert len(fake_upstream.requests_to("openai.embeddings")) == embedded
    assert (
        given.documents
        == rank_documents(
            store=store, query="alpha", options=pool_options(store, {"mode": "vector"}), query_vector=None
        ).documents
    )
    assert len(fake_upstream.requests_to("openai.embeddings")) == embedded + 1


def test_a_configuration_with_reranking_is_reranked_like_the_search_endpoint(store, rerank_connection):
    cohere = rerank_connection("cohere_rerank")
    reranking = {**LEXICAL, "rerank": True, "rerank_backend": "cohere", "rerank_connection_id": cohere.pk}

    plain = rank_documents(store=store, query="alpha", options=pool_options(store, LEXICAL), query_vector=None)
    reranked = rank_documents(store=store, query="alpha", options=pool_options(store, reranking), query_vector=None)

    assert reranked.rerank.reranked and not reranked.rerank.fallback
    # The fake reranker reverses the pool it is sent (the store's 15 rerank candidates), so the
    # unreranked ranking's best document is no longer first.
    assert reranked.documents[0] != plain.documents[0]
    assert sorted(reranked.documents) == sorted(plain.documents)
