"""BM25 on queries made only of words present in (nearly) every chunk: beyond the posting budget
such terms bring only their densest postings as candidates, so the search reads a bounded number
of postings instead of every posting of the store (issue 10: "the of" took 9.5 s on 1,558
chunks); the hits it returns keep their exact scores, and the top n overlaps full scoring as
documented."""

import json
import random

import pytest
from django.db import connection

from ingestion.services import IncomingFile, document_upload
from retrieval import bm25
from retrieval.search import store_search
from stores.models import RagStore
from stores.services import store_create
from tests.helpers import expected_top

pytestmark = pytest.mark.django_db(transaction=True)

# Words in every chunk that no configuration drops: under the default `english`, "the of" itself
# is all stop words and parses to an empty query (tested in test_search).
COMMON = ["flow", "wing", "heat"]
FILLERS = [f"filler{n}" for n in range(300)]
CHUNKS = 240
QUERIES = ["flow wing", "flow wing heat", "heat flow", "wing"]


@pytest.fixture
def common_store(fake_connection, ingest_now):
    """Every chunk holds every common word, a varying number of times, among fillers of varying
    length, so density decides the ranking."""
    rng = random.Random(101)
    texts = []
    for _ in range(CHUNKS):
        words = [w for w in COMMON for _ in range(rng.randint(1, 6))] + rng.choices(FILLERS, k=rng.randint(3, 60))
        rng.shuffle(words)
        texts.append(" ".join(words))
    created = store_create(name="common", values={"embedding_connection_id": fake_connection.id, "chunk_size": 20000})
    files = [IncomingFile(filename=f"doc{n}.txt", data=text.encode()) for n, text in enumerate(texts)]
    assert document_upload(store=created, files=files).refusal is None
    ingest_now()
    return RagStore.objects.get(pk=created.pk)


def lexical_search(store: RagStore, query: str, limit: int):
    return store_search(
        store=store, query=query, overrides={"mode": "lexical", "backend": "bm25", "top_k": limit}, candidates=limit
    )


def postings_read(store: RagStore, query: str, limit: int) -> int:
    """Rows the BM25 statement's plan read from chunk_terms, every loop counted."""
    statements = []

    def record(execute, sql_text, params, many, context):
        statements.append((sql_text, params))
        return execute(sql_text, params, many, context)

    with connection.execute_wrapper(record):
        lexical_search(store, query, limit)
    bm25 = [(text, params) for text, params in statements if "chunk_terms" in text]
    assert 1 <= len(bm25) <= 2  # the bounded pass, and the exact pass when the first was not complete

    def walk(node) -> int:
        own = node["Actual Rows"] * node["Actual Loops"] if node.get("Relation Name") == "chunk_terms" else 0
        return own + sum(walk(child) for child in node.get("Plans", []))

    read = 0
    with connection.cursor() as cursor:
        for text, params in bm25:
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + text, params)
            plan = cursor.fetchone()[0]
            plan = json.loads(plan) if isinstance(plan, str) else plan
            read += walk(plan[0]["Plan"])
    return round(read)


def test_the_store_is_the_slow_class(common_store):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT term, df FROM store_terms WHERE store_id = %s AND term = ANY(%s)", [common_store.pk, COMMON]
        )
        assert dict(cursor.fetchall()) == dict.fromkeys(COMMON, CHUNKS)


@pytest.fixture
def small_budget(monkeypatch):
    """A budget well under the postings of one common word (CHUNKS), as a large store's are, and
    an exact pass that cannot afford them either."""
    monkeypatch.setattr(bm25, "BM25_POSTING_BUDGET", 60)
    monkeypatch.setattr(bm25, "BM25_MIN_TERM_POSTINGS", 20)
    monkeypatch.setattr(bm25, "BM25_CANDIDATES_MIN", 20)
    monkeypatch.setattr(bm25, "BM25_EXACT_POSTINGS", CHUNKS - 1)


@pytest.mark.parametrize("query", QUERIES)
def test_common_words_read_a_bounded_number_of_postings(common_store, small_budget, query):
    terms = len(query.split())
    depth = max(bm25.BM25_MIN_TERM_POSTINGS, bm25.BM25_POSTING_BUDGET // terms)
    candidates = max(bm25.BM25_CANDIDATES_MIN, bm25.BM25_CANDIDATES_PER_RESULT * 10)
    # Each term's densest postings, then one posting per candidate and term for the rescoring;
    # the exact pass, finding the deciding terms' postings beyond what it may read, reads none.
    # Before the fix every posting was read (CHUNKS per term), and the lookups once per candidate.
    assert postings_read(common_store, query, 10) <= depth * terms + candidates * terms < CHUNKS * terms


@pytest.mark.parametrize("query", QUERIES)
def test_common_words_scores_are_exact_and_the_top_overlaps_full_scoring(common_store, small_budget, query):
    expected = expected_top(common_store, query, 10)
    exact_score = dict(expected_top(common_store, query, CHUNKS))
    hits = lexical_search(common_store, query, 10).hits
    assert len(hits) == 10
    for hit in hits:
        assert hit.lex_score == pytest.approx(float(exact_score[hit.chunk_id]), rel=1e-4)
    # The approximation: only the densest postings are candidates. On this store, with at most 60
    # of 240 postings per term, at least 9 of the exact top 10 are found.
    overlap = len({hit.chunk_id for hit in hits} & {chunk_id for chunk_id, _ in expected})
    assert overlap >= 9, (query, overlap)


@pytest.mark.parametrize("query", QUERIES)
def test_common_words_match_full_scoring_when_the_exact_pass_affords_their_postings(common_store, monkeypatch, query):
    # The bounded pass reads at most 60 of each term's 240 postings; the exact pass reads them all.
    monkeypatch.setattr(bm25, "BM25_POSTING_BUDGET", 60)
    monkeypatch.setattr(bm25, "BM25_MIN_TERM_POSTINGS", 20)
    monkeypatch.setattr(bm25, "BM25_CANDIDATES_MIN", 20)
    expected = expected_top(common_store, query, 10)
    hits = lexical_search(common_store, query, 10).hits
    assert [(hit.chunk_id, pytest.approx(hit.lex_score, rel=1e-6)) for hit in hits] == expected


@pytest.mark.parametrize("query", QUERIES)
def test_common_words_match_full_scoring_when_the_budget_covers_their_postings(common_store, monkeypatch, query):
    monkeypatch.setattr(bm25, "BM25_POSTING_BUDGET", CHUNKS * len(query.split()))
    expected = expected_top(common_store, query, 10)
    hits = lexical_search(common_store, query, 10).hits
    assert [hit.chunk_id for hit in hits] == [chunk_id for chunk_id, _ in expected]
