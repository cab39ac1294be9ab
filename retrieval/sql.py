"""The raw SQL of retrieval: vector candidates (HNSW or exact), full-text and BM25 candidates,
distances, hit details and vocabulary look-ups. Every function runs one statement on the
current connection and returns plain tuples."""

from __future__ import annotations

from functools import lru_cache

from django.db import connection

from stores.vector_tables import column_type, table_name

BM25_K1 = 1.2
BM25_B = 0.75
DEFAULT_MAX_SCAN_TUPLES = 20000


def _vector_literal(width: int) -> str:
    return f"%s::{column_type(width)}({width})"


def chunk_counts(store_id: int, width: int) -> tuple[int, int]:
    """(the store's chunks, the planner's row estimate of its width table), in one round trip."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce((SELECT chunk_count FROM store_text_stats WHERE store_id = %s), 0),"
            " coalesce((SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = to_regclass(%s)), 0)",
            [store_id, table_name(width)],
        )
        store_chunks, table_rows = cursor.fetchone()
    return store_chunks, table_rows


def vector_candidates(
    *, store_id: int, width: int, query_vector: str, limit: int, ef_search: int, exact: bool, max_scan_tuples: int
) -> list[tuple[int, float]]:
    """(chunk_id, cosine distance), nearest first, ties by chunk id."""
    table = table_name(width)
    literal = _vector_literal(width)
    with connection.cursor() as cursor:
        if exact:
            # `+ 0` hides the ordering from the HNSW index: the store's rows are read through its
            # store_id index and sorted exactly.
            cursor.execute(
                f"SELECT chunk_id, (embedding <=> {literal}) + 0 AS distance FROM {table} "
                "WHERE store_id = %s ORDER BY distance, chunk_id LIMIT %s",
                [query_vector, store_id, limit],
            )
            return cursor.fetchall()
        cursor.execute(
            "SELECT set_config('hnsw.ef_search', %s, false), set_config('hnsw.iterative_scan', 'relaxed_order', false),"
            " set_config('hnsw.max_scan_tuples', %s, false)",
            [str(ef_search), str(max_scan_tuples)],
        )
        # Iterative scans return nearly ordered rows; the outer sort makes the order exact.
        cursor.execute(
            f"""
            WITH nearest AS MATERIALIZED (
                SELECT chunk_id, embedding <=> {literal} AS distance FROM {table}
                WHERE store_id = %s ORDER BY embedding <=> {literal} LIMIT %s
            )
            SELECT chunk_id, distance FROM nearest ORDER BY distance, chunk_id
            """,
            [query_vector, store_id, query_vector, limit],
        )
        return cursor.fetchall()


def distances(*, width: int, query_vector: str, chunk_ids: list[int]) -> dict[int, float]:
    if not chunk_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT chunk_id, embedding <=> {_vector_literal(width)} FROM {table_name(width)} "
            "WHERE chunk_id = ANY(%s)",
            [query_vector, chunk_ids],
        )
        return dict(cursor.fetchall())


def fulltext_candidates(*, store_id: int, config: str, query: str, limit: int) -> list[tuple[int, float]]:
    """PostgreSQL full text (`ts_rank_cd`) over the `simple` index; ``config`` parses the query."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.id, ts_rank_cd(c.tsv, q) AS rank
            FROM websearch_to_tsquery(%s::regconfig, %s) q, chunks c
            WHERE numnode(q) > 0 AND c.store_id = %s AND c.tsv @@ q
            ORDER BY rank DESC, c.id LIMIT %s
            """,
            [config, query, store_id, limit],
        )
        return cursor.fetchall()


# Common terms are looked up for the surviving candidates one term per step, the more selective
# first, re-tightening the bounds after each; terms beyond the last step share it.
BM25_LOOKUP_STEPS = 3
# The first floor fully scores this many times n chunks, the ones the rarest term scores best.
BM25_FLOOR_SAMPLE = 2
# Terms in more than this share of a store's chunks are "common": their postings are never read
# in full (a query of only such words would otherwise read nearly every posting of the store, and
# their near-zero idfs leave the bounds nothing to prune). Each contributes candidates from its
# densest postings only (see _bm25_statement); scores stay exact, the candidate set is the
# approximation.
BM25_COMMON_SHARE = 0.5
# How many of a common term's postings, densest first, become candidates: at least this many,
# and at least BM25_COMMON_DEPTH_PER_RESULT times the number of results asked for.
BM25_COMMON_DEPTH_MIN = 200
BM25_COMMON_DEPTH_PER_RESULT = 5
# Relative margin on every "this bound is below the floor" test, so floating-point rounding of a
# sum can never prune a chunk that ties with the n-th best.
_BOUND_SLACK = 1e-9
# One posting's share of the score; `w` is the term's weights row, `ct` the posting. The
# constants are float8 parameters: as bare literals they would be numeric, and numeric
# arithmetic on every posting costs more than the rest of the scan.
_CONTRIBUTION = (
    "w.idf * ct.tf / (ct.tf + %(k1)s::float8 * (1 - %(b)s::float8 + %(b)s::float8 * ct.chunk_length / stats.avgdl))"
)


def bm25_candidates(
    *, store_id: int, scoring_text: str, filter_query: str | None, limit: int
) -> list[tuple[int, float]]:
    """BM25 in Lucene's form — Σ idf · tf / (tf + k1 · (1 − b + b · length / average length)) with
    idf = ln(1 + (N − df + 0.5) / (df + 0.5)), k1 1.2, b 0.75 — over the store's term statistics,
    the query tokenised by the same `simple` configuration as the chunks.

    ``filter_query`` (websearch syntax) restricts the result to chunks matching its phrases and
    exclusions; scoring uses the positive terms of ``scoring_text`` only.

    The postings of common terms are mostly skipped (MaxScore) without changing the top
    ``limit``; terms in most chunks only contribute their densest postings as candidates, which
    can miss a chunk made only of such words. See :func:`_bm25_statement`.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            _bm25_statement(filtered=bool(filter_query), lookup_steps=BM25_LOOKUP_STEPS),
            {
                "text": scoring_text,
                "store": store_id,
                "k1": BM25_K1,
                "b": BM25_B,
                "filter": filter_query,
                "limit": limit,
                "sample": BM25_FLOOR_SAMPLE * limit,
                "common_share": BM25_COMMON_SHARE,
                "depth": max(BM25_COMMON_DEPTH_MIN, BM25_COMMON_DEPTH_PER_RESULT * limit),
                "slack": _BOUND_SLACK,
            },
        )
        return cursor.fetchall()


@lru_cache(maxsize=8)
def _bm25_statement(*, filtered: bool, lookup_steps: int) -> str:
    """The BM25 top-n statement: exact scores, with MaxScore pruning.

    A term adds less than its idf to any chunk's score, and every score is a sum of positive
    parts. So the n-th best full score among any chunks is a floor the n-th best overall cannot
    be under; the first floor comes from fully scoring the 2n chunks the rarest term scores
    best. A chunk holding only terms whose idfs sum below the floor cannot reach the first n,
    so the terms whose idf, together with every more common term's, stays under it (the common
    "lookup" terms) are not read to find candidates: the other terms' postings are, giving
    candidates with partial scores. A candidate whose partial score plus the idfs of the terms
    not yet added is under the floor is dropped. Each step then raises the floor to the n-th
    best partial score, drops again, and adds the next lookup term for the candidates left
    (one index-only probe per candidate, or a walk over the term's postings where candidates
    are dense: the btree `= ANY` scan does whichever is cheaper). Ties with the n-th best are
    never dropped, so the result and its order (score, then chunk id) are those of full
    scoring. With a filter, floors count only chunks that pass it.

    Terms in more than BM25_COMMON_SHARE of the chunks (and in more than ``depth``) are always
    lookup terms: their postings are never read in full. Instead each adds its ``depth``
    densest postings (highest tf / length, from the `chunk_terms_by_density` index) as
    candidates, and the rarest term's sample comes from them when it is common itself. Every
    returned score is still exact; what is approximate is the candidate set, and only when the
    idfs of the common terms together reach the floor: a chunk among none of those densest
    postings and holding no essential term is not considered.
    """
    contribution = _CONTRIBUTION
    # Parts of one chunk's score are always added in the same order (rarest term first): chunks
    # with the same terms then get bit-identical scores and tie, whatever order the plan reads
    # postings in (floating-point addition is not associative).
    summed = f"sum({contribution} ORDER BY w.rarity)"
    slack = "(1 + %(slack)s::float8)"
    passes_filter = (
        "WHERE EXISTS (SELECT 1 FROM chunks c WHERE c.id = ranked.chunk_id"
        " AND c.tsv @@ websearch_to_tsquery('simple', %(filter)s))"
        if filtered
        else ""
    )

    def best(scores: str, *, offset: str, columns: str = "score", order: str = "score DESC") -> str:
        # The inner sort (kept apart by OFFSET 0) lets the planner check a filter in score order,
        # only until enough chunks passed; the outer ORDER BY is what guarantees the order.
        inner = f"SELECT chunk_id, score FROM {scores} ORDER BY {order} OFFSET 0"
        return f"SELECT {columns} FROM ({inner}) ranked {passes_filter} ORDER BY {order} {offset}"

    def postings(terms: str, condition: str = "") -> str:
        join = f"JOIN chunk_terms ct ON ct.store_id = %(store)s AND ct.term = w.term {condition}"
        return f"FROM {terms} w {join} CROSS JOIN stats"

    def still_to_add(step: int) -> str:
        return f"(SELECT coalesce(sum(idf), 0) FROM lookup WHERE step >= {step})"

    steps = []
    for step in range(1, lookup_steps + 1):
        previous = f"survivors_{step - 1}"
        # Before the first lookup, one essential term's partial scores are that term's own (or 0
        # for common candidates), whose n-th best the first floor already is at least.
        settled = "f.floor = '-infinity'" + (" OR (SELECT count(*) FROM essential) = 1" if step == 1 else "")
        nth_best = best(previous, offset="OFFSET %(limit)s - 1 LIMIT 1")
        kept = f"(s.score + f.still_to_add) * {slack} >= f.floor"
        kept_ids = f"ARRAY(SELECT s.chunk_id FROM {previous} s, floor_{step} f WHERE {kept})"
        step_postings = postings("lookup", f"AND ct.chunk_id = ANY({kept_ids})") + f" WHERE w.step = {step}"
        # The kept candidates and the sum of their postings of this step's terms, added per chunk:
        # a union and one aggregate, not a join, because the planner estimates every CTE at one
        # row and would otherwise rescan the postings once per candidate.
        steps.append(
            f"""
            floor_{step} AS MATERIALIZED (
                SELECT CASE WHEN {settled} THEN f.floor
                            ELSE greatest(f.floor, coalesce(({nth_best}), f.floor)) END AS floor,
                       {still_to_add(step)} AS still_to_add
                FROM floor_{step - 1} f
            ), survivors_{step} AS MATERIALIZED (
                SELECT chunk_id, sum(score) AS score FROM (
                    SELECT s.chunk_id, s.score FROM {previous} s, floor_{step} f WHERE {kept}
                    UNION ALL
                    SELECT ct.chunk_id, {summed} AS score {step_postings} GROUP BY ct.chunk_id
                ) parts
                GROUP BY chunk_id
            )"""
        )
    # Only the chain ending at the last step that holds a lookup term is evaluated: CTEs are
    # computed when first read, and the other branches are cut by their one-time filters.
    last_step = "coalesce((SELECT max(step) FROM lookup), 0)"
    scored = " UNION ALL ".join(
        f"SELECT chunk_id, score FROM survivors_{step} WHERE {last_step} = {step}" for step in range(lookup_steps + 1)
    )
    sample = best("rarest", offset="LIMIT %(sample)s", columns="chunk_id, score")
    sample_others = postings("weights", "AND ct.chunk_id = ANY(ARRAY(SELECT chunk_id FROM sample))")
    return f"""
        WITH query_terms AS (
            SELECT DISTINCT lexeme AS term FROM unnest(to_tsvector('simple', %(text)s))
        ), stats AS MATERIALIZED (
            SELECT chunk_count::float8 AS n, greatest(token_total::float8 / greatest(chunk_count, 1), 1e-9) AS avgdl
            FROM store_text_stats WHERE store_id = %(store)s
        ), weights AS MATERIALIZED (
            -- bound_through: the idfs of this term and of every more common one, the most those
            -- terms together can add to a chunk.
            SELECT term, idf, rarity, common, sum(idf) OVER (ORDER BY rarity DESC) AS bound_through
            FROM (
                SELECT st.term, ln(1 + (stats.n - st.df + 0.5) / (st.df + 0.5)) AS idf,
                       row_number() OVER (ORDER BY st.df, st.term) AS rarity,
                       st.df > greatest(%(common_share)s::float8 * stats.n, %(depth)s) AS common
                FROM store_terms st, stats
                WHERE st.store_id = %(store)s AND st.term IN (SELECT term FROM query_terms)
            ) ranked_terms
        ), densest AS MATERIALIZED (
            -- Each common term's densest postings, in the order of its density index.
            SELECT w.rarity, ct.chunk_id, {contribution} AS score
            FROM weights w CROSS JOIN stats CROSS JOIN LATERAL (
                SELECT chunk_id, tf, chunk_length FROM chunk_terms
                WHERE store_id = %(store)s AND term = w.term
                ORDER BY tf::float8 / greatest(chunk_length, 1) DESC, chunk_id LIMIT %(depth)s
            ) ct
            WHERE w.common
        ), rarest AS MATERIALIZED (
            SELECT ct.chunk_id, {contribution} AS score {postings("weights")} WHERE w.rarity = 1 AND NOT w.common
            UNION ALL
            SELECT chunk_id, score FROM densest WHERE rarity = 1
        ), sample AS MATERIALIZED (
            {sample}
        ), floor_0 AS MATERIALIZED (
            -- Bounds only hold when every idf is positive (always, unless the statistics are
            -- inconsistent); otherwise nothing is pruned.
            SELECT CASE WHEN (SELECT bool_and(idf > 0) FROM weights) THEN coalesce((
                SELECT s.score + coalesce(others.score, 0) AS score
                FROM sample s LEFT JOIN (
                    SELECT ct.chunk_id, sum({contribution}) AS score {sample_others}
                    WHERE w.rarity > 1 GROUP BY ct.chunk_id
                ) others ON others.chunk_id = s.chunk_id
                ORDER BY 1 DESC OFFSET %(limit)s - 1 LIMIT 1
            ), 0) ELSE '-infinity'::float8 END AS floor
        ), essential AS MATERIALIZED (
            SELECT w.term, w.idf, w.rarity FROM weights w, floor_0 f
            WHERE NOT w.common AND w.bound_through * {slack} >= f.floor
        ), lookup AS MATERIALIZED (
            SELECT term, idf, rarity, least(row_number() OVER (ORDER BY rarity), {lookup_steps}) AS step
            FROM weights WHERE term NOT IN (SELECT term FROM essential)
        ), survivors_0 AS MATERIALIZED (
            SELECT s.chunk_id, s.score
            FROM (
                -- A single essential term is the rarest, already scored.
                SELECT chunk_id, score FROM rarest WHERE (SELECT count(*) FROM essential) = 1
                UNION ALL
                SELECT ct.chunk_id, {summed} AS score {postings("essential")}
                WHERE (SELECT count(*) FROM essential) > 1
                GROUP BY ct.chunk_id
                UNION ALL
                -- Common terms' candidates the essential postings did not already bring; their
                -- common terms are added by the lookups like any other lookup term.
                SELECT DISTINCT d.chunk_id, 0::float8 FROM densest d
                WHERE NOT EXISTS (
                    SELECT 1 FROM essential e JOIN chunk_terms ct
                    ON ct.store_id = %(store)s AND ct.term = e.term AND ct.chunk_id = d.chunk_id
                )
            ) s, floor_0 f
            WHERE (s.score + {still_to_add(1)}) * {slack} >= f.floor
        ), {",".join(steps)}, scored AS (
            {scored}
        )
        {best("scored", offset="LIMIT %(limit)s", columns="chunk_id, score", order="score DESC, chunk_id")}
    """


def hit_details(chunk_ids: list[int]) -> dict[int, tuple]:
    """chunk id → (document_id, filename, index, section, page, content, source, tags)."""
    if not chunk_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.id, c.document_id, d.filename, c.index, c.section, c.page, c.content, d.source, d.tags
            FROM chunks c JOIN documents d ON d.id = c.document_id WHERE c.id = ANY(%s)
            """,
            [chunk_ids],
        )
        return {row[0]: row[1:] for row in cursor.fetchall()}


def query_lexemes(text: str) -> list[str]:
    """The `simple` lexemes of a query, in order of first appearance."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT lexeme FROM unnest(to_tsvector('simple', %s)) ORDER BY positions[1]", [text])
        return [row[0] for row in cursor.fetchall()]


def unknown_terms(store_id: int, terms: list[str]) -> list[str]:
    """The terms absent from the store's vocabulary, in the order given."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT t.term FROM unnest(%s::text[]) WITH ORDINALITY AS t(term, position) WHERE NOT EXISTS "
            "(SELECT 1 FROM store_terms s WHERE s.store_id = %s AND s.term = t.term) ORDER BY t.position",
            [terms, store_id],
        )
        return [row[0] for row in cursor.fetchall()]


def similar_terms(store_id: int, word: str, limit: int = 50) -> list[tuple[str, int]]:
    """Vocabulary terms sharing trigrams with ``word`` (candidates for an edit-distance check)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('pg_trgm.similarity_threshold', '0.2', false)")
        cursor.execute(
            "SELECT term, df FROM store_terms WHERE store_id = %s AND term %% %s "
            "ORDER BY similarity(term, %s) DESC, df DESC LIMIT %s",
            [store_id, word, word, limit],
        )
        return cursor.fetchall()
