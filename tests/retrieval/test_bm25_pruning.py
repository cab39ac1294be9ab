"""BM25 draws candidates from a bounded number of postings and rescores them exactly; when the
query's postings fit the budget, the top n must be exactly what full scoring gives: same chunks,
same order (ties by chunk id), same scores as bm25s."""

import json
import random

import bm25s
import numpy as np
import pytest
from django.db import connection

from ingestion.services import IncomingFile, document_upload
from retrieval import bm25
from retrieval.ranking import phrase_and_exclusion_filter, positive_text
from retrieval.search import store_search
from stores.models import Chunk, RagStore
from stores.services import store_create
from tests.helpers import chunk_tokens, expected_top, matching_chunks, query_tokens

pytestmark = pytest.mark.django_db(transaction=True)

# A Zipf-like vocabulary: the first words are in nearly every chunk, the last in a handful, so
# queries mix postings lists of very different lengths, as in real text.
WORDS = [f"word{rank}" for rank in range(1, 61)]
ZIPF_WEIGHTS = [1 / rank for rank in range(1, 61)]


def random_text(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choices(WORDS, weights=ZIPF_WEIGHTS, k=rng.randint(low, high)))


@pytest.fixture
def zipf_store(fake_connection, ingest_now):
    rng = random.Random(20261130)
    texts = [random_text(rng, 3, 40) for _ in range(180)]
    texts += texts[:6]  # identical chunks: exact ties the order must break by chunk id
    created = store_create(name="zipf", values={"embedding_connection_id": fake_connection.id, "chunk_size": 20000})
    files = [IncomingFile(filename=f"doc{n}.txt", data=f"{text} doc{n}".encode()) for n, text in enumerate(texts)]
    assert document_upload(store=created, files=files).refusal is None
    ingest_now()
    return RagStore.objects.get(pk=created.pk)


def assert_same_top(store: RagStore, query: str, limit: int) -> None:
    expected = expected_top(store, query, limit)
    result = store_search(
        store=store, query=query, overrides={"mode": "lexical", "backend": "bm25", "top_k": limit}, candidates=limit
    )
    assert [hit.chunk_id for hit in result.hits] == [chunk_id for chunk_id, _ in expected], (query, limit)
    np.testing.assert_allclose([hit.lex_score for hit in result.hits], [s for _, s in expected], atol=1e-4)


def test_top_n_equals_full_scoring_when_the_postings_fit_the_budget(zipf_store):
    rng = random.Random(7)
    queries = [" ".join(rng.sample(WORDS, rng.randint(1, 6))) for _ in range(60)]
    queries += ["word1 word2 word3", "word1 word60", "word59 word60", "doc3 word1", "doc181 word1 word2"]
    # Every posting of the store fits the budget, so every query's terms are read in full.
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM chunk_terms WHERE store_id = %s", [zipf_store.pk])
        assert cursor.fetchone()[0] <= bm25.BM25_POSTING_BUDGET
    for query in queries:
        for limit in (1, 3, 10):
            assert_same_top(zipf_store, query, limit)


def test_phrases_and_exclusions_filter_the_ranking(zipf_store):
    queries = [
        '"word1 word2" word40',
        '"word1 word1" word7 word50',
        "word1 word45 -word2",
        "word3 word30 -word1",
        '"word2 word1" -word5 word55',
        "word58 or word1",
    ]
    for query in queries:
        for limit in (1, 3, 10):
            assert_same_top(zipf_store, query, limit)


def test_every_ranked_chunk_is_returned_when_the_limit_exceeds_them(zipf_store):
    assert_same_top(zipf_store, "word20 word1", 1000)


def class_queries(store: RagStore, query_class: str, count: int) -> list[str]:
    """Queries like the latency bench's classes, drawn from this store's vocabulary."""
    rng = random.Random(query_class)
    if query_class == "typical":
        return [random_text(rng, 3, 8) for _ in range(count)]
    if query_class == "common":
        return [" ".join(rng.sample(WORDS[:5], rng.randint(2, 5))) for _ in range(count)]
    if query_class == "paragraph":
        return [random_text(rng, 30, 30) for _ in range(count)]
    contents = list(Chunk.objects.filter(store=store).order_by("id").values_list("content", flat=True))
    queries = []
    for _ in range(count):
        # Two neighbouring words of a chunk, two more words, and a middling word excluded.
        words = rng.choice(contents).split()
        start = rng.randrange(len(words) - 1)
        queries.append(f'"{words[start]} {words[start + 1]}" {random_text(rng, 2, 2)} -{rng.choice(WORDS[20:40])}')
    return queries


@pytest.fixture
def small_budget(monkeypatch):
    """A budget under nearly every query's postings (as on a large store), 40 candidates of the
    store's 186 chunks."""
    monkeypatch.setattr(bm25, "BM25_POSTING_BUDGET", 200)
    monkeypatch.setattr(bm25, "BM25_MIN_TERM_POSTINGS", 10)
    monkeypatch.setattr(bm25, "BM25_CANDIDATES_MIN", 40)
    monkeypatch.setattr(bm25, "BM25_CANDIDATES_PER_RESULT", 3)


@pytest.mark.parametrize("query_class", ["typical", "common", "paragraph", "phrase"])
def test_over_the_budget_the_exact_pass_finds_full_scorings_top_n(zipf_store, small_budget, query_class):
    over_budget = 0
    for query in class_queries(zipf_store, query_class, 12):
        assert_same_top(zipf_store, query, 10)
        terms = set(query_tokens(positive_text(query), zipf_store.query_config))
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT coalesce(sum(df), 0) FROM store_terms WHERE store_id = %s AND term = ANY(%s)",
                [zipf_store.pk, list(terms)],
            )
            over_budget += cursor.fetchone()[0] > bm25.BM25_POSTING_BUDGET
    assert over_budget >= 10


def explain_exact_pass(search):
    """Runs ``search``, then the one exact pass it issued again under EXPLAIN ANALYZE: (what
    ``search`` returned, the plan's root)."""
    statements = []

    def record(execute, sql_text, params, many, context):
        statements.append((sql_text, params))
        return execute(sql_text, params, many, context)

    with connection.execute_wrapper(record):
        returned = search()
    exact_pass = [(text, params) for text, params in statements if "bound_through" in text]
    assert len(exact_pass) == 1
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + exact_pass[0][0], exact_pass[0][1])
        plan = cursor.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    return returned, plan[0]["Plan"]


def exact_pass_plan(store: RagStore, query: str, limit: int) -> dict:
    """The exact pass's plan, after checking the search's top ``limit`` against full scoring."""
    return explain_exact_pass(lambda: assert_same_top(store, query, limit))[1]


def postings_scanned(node: dict, index: str | None = None) -> int:
    """Rows the plan read from chunk_terms (through ``index`` only, if given), those a filter
    removed included, every loop counted."""
    own = 0
    if node.get("Relation Name") == "chunk_terms" and index in (None, node.get("Index Name")):
        own = (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * node["Actual Loops"]
    return own + sum(postings_scanned(child, index) for child in node.get("Plans", []))


def chunks_rescored(node: dict) -> int:
    """Probes of the postings' primary key: one per chunk rescored."""
    own = node["Actual Loops"] if node.get("Index Name") == "chunk_terms_pkey" else 0
    return own + sum(chunks_rescored(child) for child in node.get("Plans", []))


def test_the_exact_pass_skips_the_terms_that_cannot_decide_the_top_n(zipf_store, small_budget, monkeypatch):
    # A rare word and the store's most frequent ones: the threshold set by the chunks holding the
    # rare word is out of the frequent words' reach, so their postings are not read in full when
    # reading ahead is not affordable.
    monkeypatch.setattr(bm25, "BM25_EXACT_READ_AHEAD", 0)
    query = f"{WORDS[-1]} {WORDS[0]} {WORDS[1]} {WORDS[2]}"
    plan = exact_pass_plan(zipf_store, query, 3)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sum(df) FILTER (WHERE term = %s), sum(df) FROM store_terms WHERE store_id = %s AND term = ANY(%s)",
            [WORDS[-1], zipf_store.pk, WORDS[:3] + [WORDS[-1]]],
        )
        rare_postings, all_postings = cursor.fetchone()
    assert postings_scanned(plan) < all_postings - rare_postings


def test_reading_ahead_the_skippable_terms_rescores_fewer_chunks(zipf_store, small_budget, monkeypatch):
    # Frequent words and a few less frequent ones. Skipped, the frequent words' idfs add up to
    # nearly the threshold, so almost every chunk holding another word must be rescored; read
    # (the whole query's postings fit the read-ahead), each chunk's bound is its score and only
    # the top n reach the threshold. Both give full scoring's top n.
    words = [WORDS[rank] for rank in (0, 1, 2, 5, 8, 12)]
    monkeypatch.setattr(bm25, "BM25_EXACT_READ_AHEAD", 0)
    skipping = exact_pass_plan(zipf_store, " ".join(words), 10)
    monkeypatch.setattr(bm25, "BM25_EXACT_READ_AHEAD", 10**6)
    reading = exact_pass_plan(zipf_store, " ".join(words), 10)
    with connection.cursor() as cursor:
        cursor.execute("SELECT sum(df) FROM store_terms WHERE store_id = %s AND term = ANY(%s)", [zipf_store.pk, words])
        (query_postings,) = cursor.fetchone()
    assert round(postings_scanned(reading, "chunk_terms_by_density")) == query_postings
    assert postings_scanned(skipping, "chunk_terms_by_density") < query_postings
    assert chunks_rescored(reading) == 10
    assert chunks_rescored(skipping) > 5 * 10


def test_the_exact_pass_checks_a_phrase_on_a_bounded_number_of_chunks(zipf_store, small_budget, monkeypatch):
    # A phrase few chunks hold, with frequent words: nearly every chunk the exact pass finds
    # fails the filter. It checks at most BM25_FILTER_CHECKS_PER_CANDIDATE times the chunks it
    # may rescore, best bound first, and what passes is still exactly scored.
    monkeypatch.setattr(bm25, "BM25_EXACT_READ_AHEAD", 0)
    monkeypatch.setattr(bm25, "BM25_EXACT_RESCORED", 5)
    query = f'"{WORDS[1]} {WORDS[0]}" {WORDS[0]} {WORDS[1]} {WORDS[2]} {WORDS[25]}'
    overrides = {"mode": "lexical", "backend": "bm25", "top_k": 3}
    result, plan = explain_exact_pass(
        lambda: store_search(store=zipf_store, query=query, overrides=overrides, candidates=3)
    )

    def filter_checks(node: dict) -> float:
        own = node["Actual Loops"] if node.get("Relation Name") == "chunks" else 0
        return own + sum(filter_checks(child) for child in node.get("Plans", []))

    failing = matching_chunks(zipf_store, f"{WORDS[0]} or {WORDS[1]}") - matching_chunks(zipf_store, query)
    assert len(failing) > 2 * bm25.BM25_FILTER_CHECKS_PER_CANDIDATE * 5
    assert 0 < filter_checks(plan) <= bm25.BM25_FILTER_CHECKS_PER_CANDIDATE * 5
    expected = dict(expected_top(zipf_store, query, 1000))
    assert result.hits
    for hit in result.hits:
        assert hit.lex_score == pytest.approx(expected[hit.chunk_id], abs=1e-4)


@pytest.mark.parametrize("query_class", ["typical", "common", "paragraph", "phrase"])
def test_over_the_budget_the_top_n_overlaps_full_scoring(zipf_store, small_budget, monkeypatch, query_class):
    # The exact pass cannot afford the deciding postings either: the classes are approximated,
    # and most of the exact top 10 must still be found, with exact scores.
    monkeypatch.setattr(bm25, "BM25_EXACT_POSTINGS", 0)
    ids, tokens = chunk_tokens(zipf_store)
    reference = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    reference.index(tokens, show_progress=False)
    shares, over_budget = [], 0
    for query in class_queries(zipf_store, query_class, 12):
        terms = query_tokens(positive_text(query), zipf_store.query_config)
        scores = reference.get_scores(terms)
        phrase_filter = phrase_and_exclusion_filter(query)
        allowed = matching_chunks(zipf_store, phrase_filter) if phrase_filter else set(ids)
        ranked = sorted(
            ((-round(s, 9), chunk_id) for chunk_id, s in zip(ids, scores, strict=True) if s > 0 and chunk_id in allowed)
        )
        expected = {chunk_id for _, chunk_id in ranked[:10]}
        over_budget += sum(term in chunk for term in set(terms) for chunk in tokens) > bm25.BM25_POSTING_BUDGET
        hits = store_search(
            store=zipf_store, query=query, overrides={"mode": "lexical", "backend": "bm25", "top_k": 10}, candidates=10
        ).hits
        for hit in hits:
            assert hit.lex_score == pytest.approx(float(scores[ids.index(hit.chunk_id)]), abs=1e-4)
        if expected:
            shares.append(len({hit.chunk_id for hit in hits} & expected) / len(expected))
    assert over_budget >= 10
    assert sum(shares) / len(shares) >= 0.8, (query_class, shares)
