"""The search function against real PostgreSQL: every rule of vector, lexical and hybrid search."""

import pytest
from django.db import connection

from ingestion.services import IncomingFile, document_upload
from retrieval.ranking import MAX_TYPO_CORRECTIONS
from retrieval.search import SearchOptions, matching_words, store_search
from stores.models import RagStore
from stores.services import store_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def build_store(fake_connection, ingest_now):
    def build(texts: dict[str, str], *, name="kb", connection_=None, **settings) -> RagStore:
        values = {"embedding_connection_id": (connection_ or fake_connection).id, "chunk_size": 2000, **settings}
        store = store_create(name=name, values=values)
        files = [IncomingFile(filename=filename, data=text.encode()) for filename, text in texts.items()]
        assert document_upload(store=store, files=files).refusal is None
        ingest_now()
        return RagStore.objects.get(pk=store.pk)

    return build


@pytest.mark.parametrize(
    ("mode", "max_distance", "dimensions", "embeds"),
    [
        ("vector", 0, 8, True),
        ("hybrid", 0, 8, True),
        ("lexical", 0, 8, False),
        ("lexical", 0.5, 8, True),  # the distance cut-off needs the query's vector
        ("hybrid", 0, None, False),  # nothing ingested yet: no width to search
    ],
)
def test_a_search_embeds_its_query_only_to_rank_or_cut_off_by_it(mode, max_distance, dimensions, embeds):
    options = SearchOptions(
        mode=mode,
        backend="pgvector",
        top_k=5,
        max_distance=max_distance,
        vector_weight=1.0,
        lexical_weight=1.0,
        fusion="scores",
        typo_tolerance=False,
        fts_config="simple",
    )
    assert options.embeds_query(RagStore(dimensions=dimensions)) is embeds


def names(result):
    return [hit.filename for hit in result.hits]


def test_plain_queries_match_any_of_their_words(build_store):
    store = build_store({"zebra.txt": "a zebra crossing", "quantum.txt": "quantum physics", "other.txt": "nothing"})
    result = store_search(store=store, query="zebra quantum", overrides={"mode": "lexical", "backend": "pgvector"})
    assert sorted(names(result)) == ["quantum.txt", "zebra.txt"]


def test_quoted_phrases_must_match_as_phrases(build_store):
    store = build_store({"phrase.txt": "the return policy is generous", "apart.txt": "policy on any return"})
    for backend in ("pgvector", "bm25"):
        result = store_search(store=store, query='"return policy"', overrides={"mode": "lexical", "backend": backend})
        assert names(result) == ["phrase.txt"], backend


def test_minus_excludes_a_term(build_store):
    store = build_store({"refund.txt": "refund by card", "shipping.txt": "refund of shipping costs"})
    for backend in ("pgvector", "bm25"):
        result = store_search(store=store, query="refund -shipping", overrides={"mode": "lexical", "backend": backend})
        assert names(result) == ["refund.txt"], backend


def test_a_query_that_parses_to_nothing_leaves_the_lexical_side_empty(build_store):
    store = build_store({"a.txt": "alpha", "b.txt": "beta"})
    assert store_search(store=store, query="?!", overrides={"mode": "lexical"}).hits == []
    hybrid = store_search(store=store, query="?!", overrides={"mode": "hybrid"})
    assert len(hybrid.hits) == 2
    assert all(hit.fts_rank == 0 and hit.vector_rank > 0 for hit in hybrid.hits)


def test_hybrid_fuses_min_max_scores_and_reports_both_ranks(build_store):
    store = build_store({f"{n}.txt": f"document {n} about topic {n % 3}" for n in range(6)})
    result = store_search(store=store, query="topic 1", overrides={"mode": "hybrid", "top_k": 6})
    # Every chunk is a candidate of both sides here (each holds "topic"), so the hits are the
    # whole candidate lists and each side's range can be read off them.
    assert len(result.hits) == 6 and all(hit.vector_rank and hit.fts_rank for hit in result.hits)
    distances = [hit.distance for hit in result.hits]
    lexical = [hit.lex_score for hit in result.hits]
    assert max(lexical) > min(lexical) and max(distances) > min(distances)
    for hit in result.hits:
        closeness = (max(distances) - hit.distance) / (max(distances) - min(distances))
        lexical_share = (hit.lex_score - min(lexical)) / (max(lexical) - min(lexical))
        assert hit.score == pytest.approx((closeness + lexical_share) / 2)
    assert [h.score for h in result.hits] == sorted((h.score for h in result.hits), reverse=True)


def test_lex_score_is_present_for_bm25_and_absent_for_pgvector(build_store):
    store = build_store({"a.txt": "alpha beta", "b.txt": "beta gamma"})
    bm25 = store_search(store=store, query="beta", overrides={"backend": "bm25"})
    assert bm25.backend == "bm25"
    assert all(hit.lex_score is not None for hit in bm25.hits if hit.fts_rank)
    full_text = store_search(store=store, query="beta", overrides={"backend": "pgvector"})
    assert full_text.backend == "pgvector"
    assert all(hit.lex_score is None for hit in full_text.hits)


def test_a_store_asking_for_an_unavailable_pg_search_falls_back_to_pgvector(build_store):
    store = build_store({"a.txt": "alpha beta", "b.txt": "beta gamma"})
    RagStore.objects.filter(pk=store.pk).update(search_backend="pg_search")  # e.g. a dump restored elsewhere
    store.refresh_from_db()
    result = store_search(store=store, query="beta")
    assert result.backend == "pgvector"
    assert len(result.hits) == 2
    assert all(hit.lex_score is None for hit in result.hits)


def test_max_distance_runs_after_fusion_and_keeps_scores_and_ranks(build_store, fake_upstream):
    store = build_store({f"{n}.txt": f"shared word plus {n}" for n in range(8)})
    everything = store_search(store=store, query="shared", overrides={"top_k": 8})
    distances = sorted(hit.distance for hit in everything.hits)
    cut = distances[3]
    kept = store_search(store=store, query="shared", overrides={"top_k": 8, "max_distance": cut})
    assert 0 < len(kept.hits) < len(everything.hits)
    before = {hit.chunk_id: (hit.score, hit.vector_rank, hit.fts_rank) for hit in everything.hits}
    for hit in kept.hits:
        assert hit.distance <= cut
        assert (hit.score, hit.vector_rank, hit.fts_rank) == before[hit.chunk_id]
    assert [h.chunk_id for h in kept.hits] == [h.chunk_id for h in everything.hits if h.distance <= cut]


def test_a_lexical_only_hit_beyond_the_cut_off_is_removed(build_store, fake_upstream):
    store = build_store({f"{n}.txt": f"filler text number {n}" for n in range(10)} | {"needle.txt": "needle"})
    result = store_search(store=store, query="needle", overrides={"top_k": 1, "mode": "lexical", "max_distance": 2})
    assert names(result) == ["needle.txt"]
    assert result.hits[0].distance is not None
    cut = store_search(
        store=store, query="needle", overrides={"mode": "lexical", "max_distance": result.hits[0].distance / 2}
    )
    assert cut.hits == []


def test_ef_search_is_at_least_four_times_the_candidates(build_store, settings):
    settings.VECTOR_EXACT_SCAN_MAX_CHUNKS = 0  # use the HNSW graph even for a tiny store
    store = build_store({"a.txt": "alpha", "b.txt": "beta"})
    store_search(store=store, query="alpha", overrides={"mode": "vector", "top_k": 20})
    with connection.cursor() as cursor:
        cursor.execute("SHOW hnsw.ef_search")
        assert cursor.fetchone()[0] == "240"  # 4 × (3 × 20) candidates
        settings.HNSW_EF_SEARCH_MIN = 500
        store_search(store=store, query="alpha", overrides={"mode": "vector", "top_k": 20})
        cursor.execute("SHOW hnsw.ef_search")
        assert cursor.fetchone()[0] == "500"
        cursor.execute("SHOW hnsw.iterative_scan")
        assert cursor.fetchone()[0] == "relaxed_order"


@pytest.mark.parametrize("exact_scan_max", [0, 20000])
def test_a_small_store_in_a_large_shared_table_gets_its_full_top_k(build_store, settings, exact_scan_max):
    settings.VECTOR_EXACT_SCAN_MAX_CHUNKS = exact_scan_max
    big = build_store({"big.txt": "seed"}, name="big")
    with connection.cursor() as cursor:  # 6000 more chunks of another store share the width table
        cursor.execute(
            """
            WITH doc AS (SELECT id FROM documents WHERE store_id = %(store)s LIMIT 1),
            new_chunks AS (
                INSERT INTO chunks (store_id, document_id, index, content, section, embedded_hash, token_count)
                SELECT %(store)s, doc.id, 100 + n, 'filler ' || n, '', md5(n::text), 2
                FROM doc, generate_series(1, 6000) n RETURNING id
            )
            INSERT INTO chunk_embeddings_8 (chunk_id, store_id, model_key, embedded_hash, embedding)
            SELECT id, %(store)s, 'x', md5(id::text), ARRAY[1, 0, 0, 0, 0, 0, 0, 0.001 * id]::vector(8)
            FROM new_chunks
            """,
            {"store": big.pk},
        )
        cursor.execute("ANALYZE chunk_embeddings_8")
    small = build_store({f"{n}.txt": f"small store text {n}" for n in range(10)}, name="small")
    result = store_search(store=small, query="small", overrides={"mode": "vector", "top_k": 10})
    assert len(result.hits) == 10
    assert {hit.filename for hit in result.hits} == {f"{n}.txt" for n in range(10)}


# Under `simple` a correction is a word; under the default `english` the vocabulary holds stems,
# so a typed word is compared by its stem and corrected to a stem (the query is parsed with the
# same configuration, so the stem finds every form of the word).
@pytest.mark.parametrize(
    ("index_config", "query", "corrections"),
    [
        ("simple", "prnter maintenanse", [("prnter", "printer", 1), ("maintenanse", "maintenance", 1)]),
        ("english", "Prnter mantenance", [("prnter", "printer", 1), ("mantenance", "mainten", 1)]),
    ],
)
def test_typo_tolerance_corrects_words_missing_from_the_vocabulary(build_store, index_config, query, corrections):
    store = build_store(
        {"printer.txt": "printer maintenance, as all printers need", "other.txt": "painting the fence"},
        index_config=index_config,
    )
    plain = store_search(store=store, query=query, overrides={"mode": "lexical"})
    assert plain.hits == [] and plain.corrections == []
    tolerant = store_search(store=store, query=query, overrides={"mode": "lexical", "typo_tolerance": True})
    assert names(tolerant) == ["printer.txt"]
    assert [(c.original, c.corrected, c.distance) for c in tolerant.corrections] == corrections


def test_a_corrected_stem_is_shown_as_its_most_frequent_word_in_the_indexed_text(build_store):
    store = build_store(
        {
            "contract.txt": "Liability is capped. The liability of each party, and its liabilities, end here.",
            "memo.txt": "No liability. Liabilities are listed in the annex.",
        }
    )
    result = store_search(store=store, query="liabilty annex", overrides={"mode": "lexical", "typo_tolerance": True})
    assert [(c.original, c.corrected, c.corrected_word) for c in result.corrections] == [
        ("liabilty", "liabil", "liability")
    ]


def test_two_misspellings_of_one_stem_are_both_corrected(build_store):
    # Their candidates are looked up once, for the stem they share.
    store = build_store({"a.txt": "policy policies annex", "b.txt": "police station"}, index_config="english")
    result = store_search(store=store, query="polcy polcies", overrides={"mode": "lexical", "typo_tolerance": True})
    assert [(c.original, c.corrected, c.distance) for c in result.corrections] == [
        ("polcy", "polici", 1),
        ("polcies", "polici", 1),
    ]
    assert {hit.filename for hit in result.hits} == {"a.txt"}


def test_the_shown_word_changes_neither_the_chosen_correction_nor_the_ranking(build_store):
    """The word is looked up after the choice: the same store, searched with and without
    typo tolerance for the corrected stem itself, ranks the same hits in the same order."""
    store = build_store(
        {f"{n}.txt": f"printer {'maintenance ' * n}report number {n}" for n in range(1, 6)}, index_config="english"
    )
    tolerant = store_search(store=store, query="mantenance", overrides={"mode": "lexical", "typo_tolerance": True})
    direct = store_search(store=store, query="mainten", overrides={"mode": "lexical"})
    assert [(c.corrected, c.corrected_word) for c in tolerant.corrections] == [("mainten", "maintenance")]
    assert [(h.filename, h.score) for h in tolerant.hits] == [(h.filename, h.score) for h in direct.hits]


@pytest.mark.parametrize(("index_config", "corrected"), [("simple", "category"), ("english", "categori")])
def test_typo_tolerance_leaves_short_and_known_words_alone(build_store, index_config, corrected):
    store = build_store({"a.txt": "cat catalog category"}, index_config=index_config)
    result = store_search(
        store=store, query="cta catalog catgory", overrides={"mode": "lexical", "typo_tolerance": True}
    )
    assert [(c.original, c.corrected) for c in result.corrections] == [("catgory", corrected)]


@pytest.mark.parametrize(("index_config", "corrected"), [("simple", "configuration"), ("english", "configur")])
def test_typo_tolerance_allows_two_edits_from_eight_characters(build_store, index_config, corrected):
    store = build_store({"a.txt": "configuration reference"}, index_config=index_config)
    result = store_search(store=store, query="confgiuration", overrides={"mode": "lexical", "typo_tolerance": True})
    assert [(c.corrected, c.distance) for c in result.corrections] == [(corrected, 2)]


def test_typo_tolerance_ignores_stop_words_and_corrects_a_repeated_word_once(build_store):
    store = build_store({"printer.txt": "printers need maintenance"})
    result = store_search(
        store=store, query="whom prnter PRNTER", overrides={"mode": "lexical", "typo_tolerance": True}
    )
    assert [(c.original, c.corrected) for c in result.corrections] == [("prnter", "printer")]
    assert names(result) == ["printer.txt"]


def test_stores_are_isolated(build_store):
    first = build_store({"a.txt": "shared topic alpha"}, name="first")
    second = build_store({"b.txt": "shared topic beta"}, name="second")
    assert names(store_search(store=first, query="shared topic")) == ["a.txt"]
    assert names(store_search(store=second, query="shared topic")) == ["b.txt"]


def test_hits_carry_document_metadata(build_store):
    store = build_store({"a.md": "# Intro\n\n## Setup\n\nInstall the thing."})
    (hit,) = store_search(store=store, query="install").hits
    assert (hit.filename, hit.section, hit.index, hit.page, hit.content) == (
        "a.md",
        "Intro > Setup",
        0,
        None,
        "Install the thing.",
    )


IDENTIFIER_TARGET = (
    "Quarterly maintenance of the office printers: clean the rollers, replace the toner when the indicator turns "
    "amber, and check that the paper guides are seated firmly before closing tray two. Keep spare fuser units in "
    "the supply room and log every service visit with the date and the technician's name. If the display shows "
    "ERR-4521 the fuser is overheating: switch the printer off."
)
DISTRACTOR_CODES = ["4512", "4251", "5421", "1245", "4215", "2451", "4520", "4522", "4511", "3521", "4621", "4531"]


@pytest.mark.parametrize("backend", ["bm25", "pgvector"])
def test_hybrid_finds_an_exact_identifier_the_embedding_model_misses(build_store, local_connection, backend):
    texts = {"printers.txt": IDENTIFIER_TARGET} | {
        f"error-{code}.txt": f"Error {code}: the service reported a failure code. Check the error log for details."
        for code in DISTRACTOR_CODES
    }
    store = build_store(texts, connection_=local_connection, search_backend=backend, top_k=5)
    vector = store_search(store=store, query="ERR-4521", overrides={"mode": "vector"})
    assert "printers.txt" not in names(vector)
    hybrid = store_search(store=store, query="ERR-4521", overrides={"mode": "hybrid"})
    assert names(hybrid)[0] == "printers.txt"


def test_a_question_with_or_in_it_still_ranks_by_any_word_under_bm25(build_store):
    store = build_store({"exact.txt": "exact methods", "approx.txt": "approximate methods", "none.txt": "nothing"})
    result = store_search(store=store, query="what exact or approximate methods", overrides={"mode": "lexical"})
    assert sorted(names(result)) == ["approx.txt", "exact.txt"]


@pytest.mark.parametrize("backend", ["pgvector", "bm25"])
def test_a_lower_case_or_is_a_word_and_an_upper_case_or_the_operator(build_store, backend):
    # Under `simple` "or" is indexed: a lower-case "or" is searched for like any other word, so
    # the chunk holding it ranks first (the other one would win the tie on its lower id).
    texts = {"and.txt": "tea and coffee", "or.txt": "tea or coffee", "juice.txt": "juice"}
    store = build_store(texts, index_config="simple")
    overrides = {"mode": "lexical", "backend": backend}
    assert names(store_search(store=store, query="tea or coffee", overrides=overrides)) == ["or.txt", "and.txt"]
    operator = store_search(store=store, query="tea OR juice", overrides=overrides)
    assert sorted(names(operator)) == ["and.txt", "juice.txt", "or.txt"]


@pytest.mark.parametrize("backend", ["pgvector", "bm25"])
def test_a_hyphen_that_does_not_start_a_word_excludes_nothing(build_store, backend):
    store = build_store({"axis.txt": "the x axis and the y axis", "other.txt": "axis of rotation"})
    overrides = {"mode": "lexical", "backend": backend}
    for query in ("x- and y-axis", "axis -- x", '"y axis"-x'):
        assert "axis.txt" in names(store_search(store=store, query=query, overrides=overrides)), query
    assert names(store_search(store=store, query="axis -x", overrides=overrides)) == ["other.txt"]


def test_typo_tolerance_corrects_at_most_the_first_words_of_a_long_query(build_store):
    vocabulary = [f"zq{a}{b}{c}" for a in "bcdf" for b in "ghjk" for c in "mnpq"][: MAX_TYPO_CORRECTIONS + 8]
    store = build_store({"a.txt": " ".join(vocabulary)})
    query = " ".join(f"{word}x" for word in vocabulary)  # every word one edit from a known one
    result = store_search(store=store, query=query, overrides={"mode": "lexical", "typo_tolerance": True})
    assert [c.corrected for c in result.corrections] == vocabulary[:MAX_TYPO_CORRECTIONS]
    assert names(result) == ["a.txt"]


def test_a_query_of_only_stop_words_finds_nothing_lexical_and_leaves_hybrid_to_the_vectors(build_store):
    store = build_store({"a.txt": "the flow of heat and the wing", "b.txt": "of the and"})
    for backend in ("bm25", "pgvector"):
        lexical = store_search(store=store, query="the of and", overrides={"mode": "lexical", "backend": backend})
        assert lexical.hits == []
        hybrid = store_search(store=store, query="the of and", overrides={"mode": "hybrid", "backend": backend})
        assert hybrid.hits and all(hit.fts_rank == 0 and hit.vector_rank > 0 for hit in hybrid.hits)


@pytest.mark.parametrize(
    ("index_config", "marked"),
    [("simple", ["anemones", "pools", "rock", "the"]), ("english", ["anemones", "pools", "pool", "rock"])],
)
def test_the_words_a_query_matched_follow_the_index_language(build_store, index_config, marked):
    store = build_store(
        {"a.txt": "A rocky shore: Pools, a rock pool and the pools' anemones."}, index_config=index_config
    )
    query = "the rock pools anemnes -crab a"
    result = store_search(store=store, query=query, overrides={"mode": "lexical", "typo_tolerance": True})
    assert names(result) == ["a.txt"]
    assert matching_words(query=query, result=result) == marked


@pytest.mark.parametrize("backend", ["bm25", "pgvector"])
def test_each_hit_lists_the_query_words_it_holds_anywhere_in_its_text(build_store, backend):
    store = build_store(
        {
            "memo.txt": "Contractors must renew their badges. "
            + "Filler sentence about nothing. " * 40
            + "It expires in 30 days.",
            "table.txt": "Rate 30 30 30 for the year",
        }
    )
    query = "contractors expires after 30 days -badgers"
    result = store_search(store=store, query=query, overrides={"mode": "hybrid", "backend": backend})
    matched = {hit.filename: hit.matched_terms for hit in result.hits}
    assert matched == {"memo.txt": ["contractors", "expires", "30", "days"], "table.txt": ["30"]}
