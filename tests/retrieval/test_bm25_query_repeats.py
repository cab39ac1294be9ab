"""A word the query repeats counts each time: the SQL's BM25 (bounded pass, exact pass and their
bounds) equals textbook BM25 in Lucene's form with the query term frequency summed, on random
tiny corpora and queries that repeat their words."""

import itertools
import math
from collections import Counter
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingestion.services import IncomingFile, document_upload
from retrieval import bm25
from stores.services import store_create
from tests.helpers import chunk_tokens

pytestmark = pytest.mark.django_db(transaction=True)

# Plain English words that stem to themselves and are no stop words.
WORDS = ["river", "delta", "stone", "glacier", "harbour", "lantern", "meadow", "copper"]
K1, B = 1.2, 0.75
# Each example makes its own store, and store names are unique.
STORE_NUMBERS = itertools.count()

texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=14).map(" ".join)
corpora = st.lists(texts, min_size=2, max_size=9)
# A query holding at least one word twice or more.
queries = (
    st.lists(st.sampled_from(WORDS), min_size=2, max_size=10)
    .filter(lambda words: len(set(words)) < len(words))
    .map(" ".join)
)


def reference_scores(tokens: list[list[str]], query: list[str]) -> list[float]:
    """Σ over the query's tokens (a repeated one each time) of idf · tf / (tf + k1 · (1 − b + b ·
    length / average length)), idf = ln(1 + (N − df + 0.5) / (df + 0.5))."""
    count = len(tokens)
    average = sum(len(chunk) for chunk in tokens) / count
    frequencies = [Counter(chunk) for chunk in tokens]
    scores = []
    for chunk, tf in zip(tokens, frequencies, strict=True):
        score = 0.0
        for term in query:
            df = sum(term in other for other in frequencies)
            if tf[term]:
                idf = math.log(1 + (count - df + 0.5) / (df + 0.5))
                score += idf * tf[term] / (tf[term] + K1 * (1 - B + B * len(chunk) / average))
        scores.append(score)
    return scores


# Default constants (every posting fits the budget: the bounded pass is full scoring), and a
# budget of two postings with few candidates, so that the exact pass and its bounds decide.
BUDGETS = {
    "full": {"BM25_POSTING_BUDGET": bm25.BM25_POSTING_BUDGET},
    "pruned": {
        "BM25_POSTING_BUDGET": 2,
        "BM25_MIN_TERM_POSTINGS": 1,
        "BM25_CANDIDATES_MIN": 1,
        "BM25_CANDIDATES_PER_RESULT": 1,
        "BM25_EXACT_READ_AHEAD": 0,
    },
}


@pytest.mark.parametrize("budget", sorted(BUDGETS))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(corpus=corpora, query=queries, limit=st.integers(min_value=1, max_value=4))
def test_repeated_query_words_count_each_time(fake_connection, ingest_now, budget, corpus, query, limit):
    values = {"embedding_connection_id": fake_connection.id, "chunk_size": 20000}
    store = store_create(name=f"qtf-{next(STORE_NUMBERS)}", values=values)
    files = [IncomingFile(filename=f"doc{n}.txt", data=f"{text} doc{n}".encode()) for n, text in enumerate(corpus)]
    assert document_upload(store=store, files=files).refusal is None
    ingest_now()
    ids, tokens = chunk_tokens(store)
    expected = dict(zip(ids, reference_scores(tokens, query.split()), strict=True))
    with mock.patch.multiple(bm25, **BUDGETS[budget]):
        found = bm25.bm25_candidates(
            store_id=store.pk, config=store.query_config, scoring_text=query, filter_query=None, limit=limit
        )
    best = sorted((score for score in expected.values() if score > 0), reverse=True)[:limit]
    assert [score for _, score in found] == pytest.approx(best, abs=1e-9)
    for chunk_id, score in found:
        assert score == pytest.approx(expected[chunk_id], abs=1e-9)
