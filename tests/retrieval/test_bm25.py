"""Our in-database BM25 against a reference implementation (bm25s) given the same tokens."""

import bm25s
import numpy as np
import pytest

from ingestion.services import IncomingFile, document_upload
from retrieval.search import store_search
from stores.models import RagStore
from stores.services import store_create
from tests.helpers import chunk_tokens, query_tokens

pytestmark = pytest.mark.django_db(transaction=True)

CORPUS = {
    # Lengths from two words to over a hundred; "common" is in more than half of the documents;
    # "twin-a" and "twin-b" have identical statistics, so their scores tie.
    "short.txt": "common ground",
    "twin-a.txt": "common river delta",
    "twin-b.txt": "common delta river",
    "long.txt": " ".join(["common river"] * 3 + [f"filler{n}" for n in range(120)]),
    "medium.txt": "the delta of the river floods every spring and the common land turns green",
    "repeat.txt": "river river river river river current",
    "unrelated.txt": "mountains and glaciers far from any water",
    "tail.txt": "a single delta",
    "common-only.txt": "common common",
}
QUERIES = ["river delta", "common", "river common glaciers", "floods spring delta", "current"]


# The arithmetic on plain words and on stems (the default `english` drops stop words and merges
# "floods" with "flood").
@pytest.fixture(params=["simple", "english"])
def store(request, fake_connection, ingest_now):
    created = store_create(
        name="bm25",
        values={"embedding_connection_id": fake_connection.id, "chunk_size": 20000, "index_config": request.param},
    )
    files = [IncomingFile(filename=name, data=text.encode()) for name, text in CORPUS.items()]
    assert document_upload(store=created, files=files).refusal is None
    ingest_now()
    return RagStore.objects.get(pk=created.pk)


@pytest.mark.parametrize("query", QUERIES)
def test_scores_and_order_match_the_reference(store, query):
    ids, tokens = chunk_tokens(store)
    reference = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    reference.index(tokens, show_progress=False)
    expected_scores = reference.get_scores(query_tokens(query, store.query_config))
    expected = sorted(
        ((chunk_id, score) for chunk_id, score in zip(ids, expected_scores, strict=True) if score > 0),
        key=lambda pair: (-round(pair[1], 9), pair[0]),
    )
    result = store_search(
        store=store, query=query, overrides={"mode": "lexical", "backend": "bm25", "top_k": 100}, candidates=100
    )
    assert [hit.chunk_id for hit in result.hits] == [chunk_id for chunk_id, _ in expected]
    np.testing.assert_allclose([hit.lex_score for hit in result.hits], [s for _, s in expected], atol=1e-4)


def test_the_corpus_exercises_what_the_comparison_must_cover(store):
    ids, tokens = chunk_tokens(store)
    lengths = [len(t) for t in tokens]
    assert max(lengths) > 50 * min(lengths)
    assert sum("common" in t for t in tokens) > len(tokens) / 2
    scores = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    scores.index(tokens, show_progress=False)
    river_delta = scores.get_scores(["river", "delta"])
    assert len(set(np.round(river_delta, 9))) < len(river_delta)  # at least one tie


def test_term_statistics_follow_deletes_and_reprocessing(store, ingest_now):
    from ingestion.services import store_reprocess
    from stores.models import Document
    from stores.services import document_delete

    document_delete(document=Document.objects.get(store=store, filename="long.txt"))
    store_reprocess(store=store)
    ingest_now()
    ids, tokens = chunk_tokens(store)
    reference = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    reference.index(tokens, show_progress=False)
    expected = dict(zip(ids, reference.get_scores(["river"]), strict=True))
    result = store_search(store=store, query="river", overrides={"mode": "lexical", "backend": "bm25", "top_k": 50})
    for hit in result.hits:
        assert hit.lex_score == pytest.approx(expected[hit.chunk_id], abs=1e-4)
