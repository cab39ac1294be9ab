"""BM25 in SQL: the bounded candidate pass, the exact pass after it, and the exact scoring of a
given set of chunks (a filtered search's, retrieval/filtered.py), over the store's postings
(`chunk_terms`) and statistics (`store_terms`, `store_text_stats`)."""

from __future__ import annotations

from functools import lru_cache

from django.db import connection

BM25_K1 = 1.2
BM25_B = 0.75


# Candidates come from at most about this many postings in all, whatever the query: the rarest
# terms' postings in full while the budget lasts, the rest sharing what is left (see
# _bm25_statement). A query whose terms' postings all fit is scored exactly.
BM25_POSTING_BUDGET = 12000
# A term beyond the budget still brings at least this many of its densest postings.
BM25_MIN_TERM_POSTINGS = 50
# How many candidates, best partial score first, are rescored exactly over every query term: at
# least BM25_CANDIDATES_MIN and BM25_CANDIDATES_PER_RESULT times the number of results asked for.
BM25_CANDIDATES_MIN = 300
BM25_CANDIDATES_PER_RESULT = 5
# With a phrase or an exclusion, at most this many times the candidates kept are checked against
# it (each check reads a chunk's tsvector): a rare phrase would otherwise have every candidate
# checked.
BM25_FILTER_CHECKS_PER_CANDIDATE = 4
# When the budget left a term partly read, the exact pass (_bm25_exact_statement) reads the
# postings of every term that can still decide the top ``limit`` in full, if they number at most
# this many; beyond, the budget's approximation stands.
BM25_EXACT_POSTINGS = 60000
# The exact pass also reads in full, rarest first, the terms it could skip while their postings
# and every rarer term's number at most this many: a posting read in a row costs far less than
# the probe of each chunk that a skipped term's weight would leave to rescore.
BM25_EXACT_READ_AHEAD = 12000
# The exact pass rescores at most this many of those chunks (one probe each), best bound first.
BM25_EXACT_RESCORED = 1000
# Relative: far above the error of adding a query's terms' parts in float8 in any order.
_ROUNDING_SLACK = 1e-9


def density_order(table: str = "") -> str:
    """The order of a term's postings in the `chunk_terms_by_density` index (migration 0005),
    densest first: written once, as a statement must spell it for the planner to use the index.
    ``table`` qualifies the columns ("ct." in a join)."""
    return f"{table}tf::float8 / greatest({table}chunk_length, 1) DESC, {table}chunk_id"


def _contribution(weight: str) -> str:
    """One posting's share of the score; ``weight`` is the term's weight (_TERM_WEIGHT), `ct` the posting. The
    constants are float8 parameters: as bare literals they would be numeric, and numeric
    arithmetic on every posting costs more than the rest of the scan."""
    length_norm = "(1 - %(b)s::float8 + %(b)s::float8 * ct.chunk_length / stats.avgdl)"
    return f"{weight} * ct.tf / (ct.tf + %(k1)s::float8 * {length_norm})"


def _parameters(*, store_id: int, config: str, scoring_text: str, filter_query: str | None, limit: int) -> dict:
    """The parameters every BM25 statement takes."""
    return {
        "config": config,
        "text": scoring_text,
        "store": store_id,
        "k1": BM25_K1,
        "b": BM25_B,
        "filter": filter_query,
        "limit": limit,
    }


def bm25_candidates(
    *, store_id: int, config: str, scoring_text: str, filter_query: str | None, limit: int
) -> list[tuple[int, float]]:
    """BM25 in Lucene's form — Σ qtf · idf · tf / (tf + k1 · (1 − b + b · length / average length))
    with idf = ln(1 + (N − df + 0.5) / (df + 0.5)), k1 1.2, b 0.75, qtf the times the query holds
    the term — over the store's term statistics, the query tokenised by ``config``, the
    configuration the store's index is built with.

    ``filter_query`` (websearch syntax) restricts the result to chunks matching its phrases and
    exclusions; scoring uses the positive terms of ``scoring_text`` only. Rows are (chunk id,
    score), best first, ties by chunk id.

    Every returned score is exact, and so is the top ``limit`` whenever finding it is cheap:
    the bounded pass (:func:`_bm25_statement`) is full scoring when the query's postings fit
    BM25_POSTING_BUDGET; when they do not, its ``limit``-th score is a threshold no chunk holding
    only the query's most frequent terms can reach, and the exact pass
    (:func:`_bm25_exact_statement`) scores every chunk holding one of the others. Only when those
    terms' postings exceed BM25_EXACT_POSTINGS does the bounded pass's approximation stand.
    """
    parameters = _parameters(
        store_id=store_id, config=config, scoring_text=scoring_text, filter_query=filter_query, limit=limit
    )
    candidates = max(BM25_CANDIDATES_MIN, BM25_CANDIDATES_PER_RESULT * limit)
    with connection.cursor() as cursor:
        cursor.execute(
            _bm25_statement(filtered=bool(filter_query)),
            {
                **parameters,
                "budget": BM25_POSTING_BUDGET,
                "min_postings": BM25_MIN_TERM_POSTINGS,
                "candidates": candidates,
                "checks": BM25_FILTER_CHECKS_PER_CANDIDATE * candidates,
            },
        )
        bounded = cursor.fetchall()
        if not bounded or all(complete for _, _, complete in bounded):
            return [(chunk_id, score) for chunk_id, score, _ in bounded]
        # Lowered by a hair: the exact pass's bounds add the same parts in another order, and a
        # chunk whose bound is its exact score (every term read) must not fall below its own score
        # by a rounding. A lower threshold only reads and rescores a little more.
        threshold = bounded[-1][1] * (1 - _ROUNDING_SLACK) if len(bounded) >= limit else 0.0
        cursor.execute(
            _bm25_exact_statement(filtered=bool(filter_query)),
            {
                **parameters,
                "threshold": threshold,
                "max_postings": BM25_EXACT_POSTINGS,
                "read_ahead": BM25_EXACT_READ_AHEAD,
                "rescored": BM25_EXACT_RESCORED,
                "checks": BM25_FILTER_CHECKS_PER_CANDIDATE * BM25_EXACT_RESCORED,
            },
        )
        exact = cursor.fetchall()
    if not exact:  # the deciding terms' postings are too many to read: the approximation stands
        return [(chunk_id, score) for chunk_id, score, _ in bounded]
    return exact


# A query term's weight in the BM25 sum (`qt` the query term, `st` its store statistics): its idf
# times the times the query holds it. A word the query repeats counts each time, as a repeated
# clause does in Lucene, a repeated token in bm25s and Robertson's qtf factor (with k3 large).
_TERM_WEIGHT = "qt.occurrences * ln(1 + (stats.n - st.df + 0.5) / (st.df + 0.5))"
# The first CTEs of both BM25 statements: the query's distinct lexemes, each with how often the
# query holds it (its positions), and the store's chunk count and average length.
_QUERY_TERMS_AND_STATS = """WITH query_terms AS (
            SELECT lexeme AS term, cardinality(positions) AS occurrences
            FROM unnest(to_tsvector(%(config)s::regconfig, %(text)s))
        ), stats AS MATERIALIZED (
            SELECT chunk_count::float8 AS n, greatest(token_total::float8 / greatest(chunk_count, 1), 1e-9) AS avgdl
            FROM store_text_stats WHERE store_id = %(store)s
        )"""


def _passes_filter(ranked: str) -> str:
    """The condition that the chunk ``ranked``.chunk_id matches the phrase and exclusion filter."""
    return (
        f"WHERE EXISTS (SELECT 1 FROM chunks c WHERE c.id = {ranked}.chunk_id"
        " AND c.tsv @@ websearch_to_tsquery(%(config)s::regconfig, %(filter)s))"
    )


@lru_cache(maxsize=2)
def _bm25_statement(*, filtered: bool) -> str:
    """The BM25 top-n statement: bounded candidate generation, then exact rescoring.

    1. The query's terms, rarest first, are given postings from the budget: a term is read in
       full while its postings and every rarer term's fit; the terms beyond share what is left
       (at least ``min_postings`` each) and bring only their densest postings (highest tf /
       length, from the `chunk_terms_by_density` index), the ones that score a chunk highest.
       Rare terms carry most of the weight (their idf), so they are the ones read in full.
    2. Those postings, summed per chunk (less what each term read in part is expected to add
       to any chunk), rank the chunks; the best ``candidates`` (only chunks passing the filter,
       checked in that order until enough have, and on at most ``checks``) are kept.
    3. The kept chunks are rescored exactly over every query term, one probe per chunk of the
       postings' primary key (chunk_id, term; it covers tf and length), and the best ``limit``
       returned, ties by chunk id.

    When every term is read in full the ranking values are the exact scores and the result is
    full scoring's; each row says so in its third column (``complete``). Otherwise a chunk may be
    missed if it is among no rare term's postings and no frequent term's densest, or if it ranks
    below the ``candidates``-th in step 2 (the exact pass then looks again). A quoted phrase or an
    exclusion only filters the candidates: a phrase whose chunks are none of them returns fewer
    hits than full scoring would.
    """
    contribution = _contribution("w.weight")
    passes_filter = _passes_filter("ranked") if filtered else ""
    in_budget = "postings_through <= %(budget)s"
    checked = "LIMIT %(checks)s" if filtered else ""
    return f"""
        {_QUERY_TERMS_AND_STATS}, ranked_terms AS MATERIALIZED (
            -- postings_through: the postings of this term and of every rarer one.
            SELECT st.term, st.df, {_TERM_WEIGHT} AS weight,
                   row_number() OVER (ORDER BY st.df, st.term) AS rarity,
                   sum(st.df) OVER (ORDER BY st.df, st.term) AS postings_through
            FROM store_terms st JOIN query_terms qt ON qt.term = st.term, stats
            WHERE st.store_id = %(store)s
        ), weights AS MATERIALIZED (
            SELECT term, weight, rarity, df, CASE WHEN {in_budget} THEN df ELSE greatest(
                %(min_postings)s,
                (%(budget)s - coalesce(max(postings_through) FILTER (WHERE {in_budget}) OVER (), 0))
                / count(*) FILTER (WHERE NOT {in_budget}) OVER ()
            ) END AS depth
            FROM ranked_terms
        ), postings AS MATERIALIZED (
            SELECT ct.chunk_id, w.rarity, {contribution} AS score
            FROM weights w CROSS JOIN stats CROSS JOIN LATERAL (
                SELECT chunk_id, tf, chunk_length FROM chunk_terms
                WHERE store_id = %(store)s AND term = w.term
                ORDER BY {density_order()} LIMIT w.depth
            ) ct
        ), unseen AS MATERIALIZED (
            -- What a term read only in part is expected to add to a chunk not among its postings
            -- read: the chance the chunk holds it anyway times its smallest score read. Zero for
            -- terms read in full.
            SELECT w.rarity, (w.df - count(*)) / greatest(stats.n - count(*), 1) * min(p.score) AS expected
            FROM weights w JOIN postings p ON p.rarity = w.rarity CROSS JOIN stats
            GROUP BY w.rarity, w.df, stats.n
        ), partial AS MATERIALIZED (
            -- Candidates rank by what their postings read add over the expected, so a chunk seen
            -- in a frequent term's densest postings does not outrank one holding rarer terms for
            -- that alone. Parts are always added rarest term first: chunks with the same terms
            -- then get bit-identical values and tie, whatever order the plan reads postings in
            -- (floating-point addition is not associative), and with every term read in full the
            -- value is the exact score.
            SELECT p.chunk_id, sum(p.score - u.expected ORDER BY p.rarity) AS score
            FROM postings p JOIN unseen u ON u.rarity = p.rarity GROUP BY p.chunk_id
        ), query AS MATERIALIZED (
            -- complete: every term read in full, so the ranking above was full scoring.
            SELECT array_agg(term ORDER BY rarity) AS terms, array_agg(weight ORDER BY rarity) AS weights,
                   bool_and(depth >= df) AS complete
            FROM weights
        ), kept AS MATERIALIZED (
            -- The inner sort (kept apart by OFFSET 0) lets the planner check the filter in score
            -- order, only until enough chunks passed, and on ``checks`` chunks at most.
            SELECT chunk_id FROM (
                SELECT chunk_id, score FROM partial ORDER BY score DESC, chunk_id {checked} OFFSET 0
            ) ranked
            {passes_filter}
            ORDER BY score DESC, chunk_id LIMIT %(candidates)s
        )
        -- Each kept chunk's exact score (_RESCORE_CHUNK).
        SELECT k.chunk_id, sum(ct.part ORDER BY ct.rarity) AS score, bool_and(q.complete) AS complete
        FROM kept k CROSS JOIN query q CROSS JOIN stats CROSS JOIN LATERAL (
            {_RESCORE_CHUNK.format(contribution=_contribution("q.weights[r.rarity]"), chunk="k.chunk_id")}
        ) ct
        GROUP BY k.chunk_id
        ORDER BY score DESC, k.chunk_id LIMIT %(limit)s
    """


# One kept chunk's parts of the score: one probe of the postings primary key for the query's
# terms, answered from the index. OFFSET 0 keeps the probe per chunk: flattened into a join, the
# planner (which estimates every CTE at a few rows) reads the terms' whole postings lists
# instead. A term's weight is looked up by its position in the query's arrays, not joined, for the
# same reason.
_RESCORE_CHUNK = """
    SELECT r.rarity, {contribution} AS part
    FROM chunk_terms ct CROSS JOIN LATERAL array_position(q.terms, ct.term) r(rarity)
    WHERE ct.chunk_id = {chunk} AND ct.term = ANY(q.terms) OFFSET 0
"""
# The last step of the exact statements: each `kept` chunk rescored (_RESCORE_CHUNK) over the
# `query` CTE's terms, the best ``limit`` returned, ties by chunk id.
_RESCORED_TOP = f"""
        SELECT k.chunk_id, sum(ct.part ORDER BY ct.rarity) AS score
        FROM kept k CROSS JOIN query q CROSS JOIN stats CROSS JOIN LATERAL (
            {_RESCORE_CHUNK.format(contribution=_contribution("q.weights[r.rarity]"), chunk="k.chunk_id")}
        ) ct
        GROUP BY k.chunk_id
        ORDER BY score DESC, k.chunk_id LIMIT %(limit)s
"""


@lru_cache(maxsize=2)
def _bm25_exact_statement(*, filtered: bool) -> str:
    """The exact top-n once a ``threshold`` is known (the n-th score of chunks scored exactly),
    in the manner of MaxScore.

    A term adds less than its weight (idf times the times the query holds it) to any chunk
    (tf / (tf + k1 · …) < 1). Only the query's lightest terms may be skipped, and only while
    their weights sum below ``threshold``: a chunk
    holding none but those scores below the threshold and cannot be in the top n. Every other
    term is read in full: the deciding ones, which must be (when their postings number at most
    ``max_postings``; else nothing is returned), and, rarest first, the skippable ones whose
    postings and every rarer term's still fit ``read_ahead``. Each chunk found is bounded by what
    those postings add plus the skipped terms' weights, and the chunks whose bound reaches the
    threshold, best bound first (at most ``rescored``; with a filter, those passing it among the
    first ``checks``), are rescored exactly over every term. When neither cap cuts the chunks
    short, the best n of those are exactly full scoring's.

    Reading ahead is what keeps the rescoring small: a rescored chunk costs one probe of the
    postings' primary key, as much as a few dozen postings read in a row, and every term skipped
    adds its weight to every chunk's bound. Skipping all a MaxScore may leaves the skipped weights close
    to the threshold itself, so that almost every chunk found would have to be rescored.
    """
    passes_filter = _passes_filter("bounded") if filtered else ""
    checked = "LIMIT %(checks)s" if filtered else ""
    return f"""
        {_QUERY_TERMS_AND_STATS}, terms AS MATERIALIZED (
            SELECT st.term, st.df, {_TERM_WEIGHT} AS weight,
                   row_number() OVER (ORDER BY st.df, st.term) AS rarity
            FROM store_terms st JOIN query_terms qt ON qt.term = st.term, stats
            WHERE st.store_id = %(store)s
        ), bounds AS MATERIALIZED (
            -- bound_through: the weights of this term and of every lighter one;
            -- postings_through: the postings of this term and of every rarer one.
            SELECT term, df, weight, rarity, sum(weight) OVER (ORDER BY weight, term) AS bound_through,
                   sum(df) OVER (ORDER BY rarity) AS postings_through
            FROM terms
        ), read AS MATERIALIZED (
            SELECT term, weight, rarity, df, bound_through >= %(threshold)s::float8 AS deciding FROM bounds
            WHERE bound_through >= %(threshold)s::float8 OR postings_through <= %(read_ahead)s
        ), plan AS MATERIALIZED (
            SELECT coalesce((SELECT sum(weight) FROM terms WHERE term NOT IN (SELECT term FROM read)), 0)
                       AS skipped_bound,
                   coalesce((SELECT sum(df) FROM read WHERE deciding), 0) <= %(max_postings)s AS affordable
        ), seen AS MATERIALIZED (
            -- A bound needs no particular order of addition: a plain sum, hashed, not sorted.
            SELECT ct.chunk_id, sum({_contribution("r.weight")}) AS score
            FROM read r CROSS JOIN stats CROSS JOIN LATERAL (
                -- Each term's postings through the density index, as the bounded pass reads them:
                -- joined instead, a small table's plan may scan every term's postings.
                SELECT chunk_id, tf, chunk_length FROM chunk_terms
                WHERE store_id = %(store)s AND term = r.term
                ORDER BY {density_order()}
            ) ct
            -- An uncorrelated condition: checked once, before any posting is read.
            WHERE (SELECT affordable FROM plan)
            GROUP BY ct.chunk_id
        ), bounded AS MATERIALIZED (
            SELECT s.chunk_id, s.score + plan.skipped_bound AS bound
            FROM seen s CROSS JOIN plan
            WHERE s.score + plan.skipped_bound >= %(threshold)s::float8
        ), kept AS MATERIALIZED (
            SELECT chunk_id FROM (
                SELECT chunk_id, bound FROM bounded ORDER BY bound DESC, chunk_id {checked} OFFSET 0
            ) bounded
            {passes_filter}
            ORDER BY bound DESC, chunk_id LIMIT %(rescored)s
        ), query AS MATERIALIZED (
            SELECT array_agg(term ORDER BY rarity) AS terms, array_agg(weight ORDER BY rarity) AS weights FROM terms
        )
        {_RESCORED_TOP}
    """


def bm25_scored(
    *,
    store_id: int,
    config: str,
    scoring_text: str,
    filter_query: str | None,
    passing: str,
    passing_params: dict,
    limit: int,
) -> list[tuple[int, float]]:
    """Full BM25 scoring of the chunks of the store's documents meeting ``passing`` (a condition
    on the document row ``d``, with its named parameters, from retrieval.filters): each such chunk
    rescored over every query term as the bounded pass rescores its candidates, so a chunk's score
    is the one an unfiltered search gives it, bit for bit. Rows as :func:`bm25_candidates`'s.

    Its cost is a probe per passing chunk and query term: the path of a selective filter."""
    phrase = "AND c.tsv @@ websearch_to_tsquery(%(config)s::regconfig, %(filter)s)" if filter_query else ""
    statement = f"""
        {_QUERY_TERMS_AND_STATS}, terms AS MATERIALIZED (
            SELECT st.term, {_TERM_WEIGHT} AS weight, row_number() OVER (ORDER BY st.df, st.term) AS rarity
            FROM store_terms st JOIN query_terms qt ON qt.term = st.term, stats
            WHERE st.store_id = %(store)s
        ), query AS MATERIALIZED (
            SELECT array_agg(term ORDER BY rarity) AS terms, array_agg(weight ORDER BY rarity) AS weights FROM terms
        ), kept AS MATERIALIZED (
            SELECT c.id AS chunk_id FROM documents d JOIN chunks c ON c.document_id = d.id
            WHERE d.store_id = %(store)s AND {passing} {phrase}
        )
        {_RESCORED_TOP}
    """
    parameters = _parameters(
        store_id=store_id, config=config, scoring_text=scoring_text, filter_query=filter_query, limit=limit
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, {**passing_params, **parameters})
        return cursor.fetchall()
