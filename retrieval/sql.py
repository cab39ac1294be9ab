"""The raw SQL of retrieval: vector candidates (HNSW or exact), full-text candidates, distances,
hit details and vocabulary look-ups (BM25's statements are retrieval.bm25's). Every function
runs one statement on the current connection and returns plain tuples."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection

from retrieval.bm25 import density_order
from stores.vector_tables import column_type, table_name

DEFAULT_MAX_SCAN_TUPLES = 20000
# pgvector refuses a larger hnsw.ef_search; an iterative scan goes on past it to the limit.
HNSW_EF_SEARCH_MAX = 1000


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


def fulltext_candidates(
    *, store_id: int, config: str, query: str, limit: int, passing: DocumentCondition | None = None
) -> list[tuple[int, float]]:
    """PostgreSQL full text (`ts_rank_cd`) over the chunks' tsvectors; ``config`` parses the query
    (websearch syntax, already split at punctuation by stores.lexical.lexical_query). With
    ``passing``, only chunks of the documents meeting it, before the limit."""
    within, within_params = (
        ("", []) if passing is None else (f"AND c.document_id IN ({passing.documents()})", passing.all_params(store_id))
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT c.id, ts_rank_cd(c.tsv, q) AS rank
            FROM websearch_to_tsquery(%s::regconfig, %s) q, chunks c
            WHERE numnode(q) > 0 AND c.store_id = %s AND c.tsv @@ q {within}
            ORDER BY rank DESC, c.id LIMIT %s
            """,
            [config, query, store_id, *within_params, limit],
        )
        return cursor.fetchall()


@dataclass(frozen=True)
class DocumentCondition:
    """A condition on a document's row (alias ``d``), with its positional parameters: a search
    filter compiled by retrieval.filters."""

    sql: str
    params: list

    def documents(self) -> str:
        """The ids of the store's documents meeting it (the store is the first parameter)."""
        return f"SELECT d.id FROM documents d WHERE d.store_id = %s AND {self.sql}"

    def all_params(self, store_id: int) -> list:
        return [store_id, *self.params]


def passing_chunk_count(*, store_id: int, passing: DocumentCondition) -> tuple[int, int]:
    """(the chunks the store's documents meeting the condition hold, as ingestion counted them,
    read through the documents' GIN indexes; the store's chunks)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT coalesce(sum(d.chunk_count), 0), "
            "coalesce((SELECT chunk_count FROM store_text_stats WHERE store_id = %s), 0) "
            f"FROM documents d WHERE d.store_id = %s AND {passing.sql}",
            [store_id, *passing.all_params(store_id)],
        )
        return cursor.fetchone()


def passing_chunks(*, store_id: int, chunk_ids: list[int], passing: DocumentCondition) -> set[int]:
    """Those of ``chunk_ids`` whose document meets the condition."""
    if not chunk_ids:
        return set()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id "
            f"WHERE c.id = ANY(%s) AND d.store_id = %s AND {passing.sql}",
            [chunk_ids, *passing.all_params(store_id)],
        )
        return {row[0] for row in cursor.fetchall()}


def passing_vector_candidates(
    *, store_id: int, width: int, query_vector: str, limit: int, passing: DocumentCondition
) -> list[tuple[int, float]]:
    """:func:`vector_candidates`' exact path over the chunks of the documents meeting the
    condition alone: the same distances, nearest first, ties by chunk id."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT e.chunk_id, (e.embedding <=> {_vector_literal(width)}) + 0 AS distance "
            f"FROM documents d JOIN chunks c ON c.document_id = d.id JOIN {table_name(width)} e ON e.chunk_id = c.id "
            f"WHERE d.store_id = %s AND {passing.sql} ORDER BY distance, e.chunk_id LIMIT %s",
            [query_vector, *passing.all_params(store_id), limit],
        )
        return cursor.fetchall()


def hit_details(chunk_ids: list[int]) -> dict[int, tuple]:
    """chunk id → (document_id, filename, index, section, page, content, source, tags, attributes)."""
    if not chunk_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.id, c.document_id, d.filename, c.index, c.section, c.page, c.content, d.source, d.tags,
                   d.attributes::text
            FROM chunks c JOIN documents d ON d.id = c.document_id WHERE c.id = ANY(%s)
            """,
            [chunk_ids],
        )
        return {row[0]: row[1:] for row in cursor.fetchall()}


def matched_words(*, chunk_ids: list[int], words: list[str], config: str) -> dict[int, list[str]]:
    """chunk id → the ``words`` (in the order given) of which the chunk's tsvector holds a lexeme,
    each word parsed with ``config`` as a query is: the words a chunk matched, wherever they are
    in it. Stop words match nothing (they parse to no lexeme).

    Each word is parsed once and each chunk's lexemes listed once: parsed per chunk and word, a
    pasted page of 450 words took 10-14 ms over ten hits at 100k chunks, now 2.5-3.5."""
    if not chunk_ids or not words:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH parsed AS MATERIALIZED (
                SELECT w.word, w.position, tsvector_to_array(to_tsvector(%s::regconfig, w.word)) AS lexemes
                FROM unnest(%s::text[]) WITH ORDINALITY AS w(word, position)
            ), held AS MATERIALIZED (
                SELECT id, tsvector_to_array(tsv) AS lexemes FROM chunks WHERE id = ANY(%s) AND tsv IS NOT NULL
            )
            SELECT held.id, ARRAY(
                SELECT p.word FROM parsed p WHERE p.lexemes && held.lexemes ORDER BY p.position
            )
            FROM held
            """,
            [config, words, chunk_ids],
        )
        return {chunk_id: matched for chunk_id, matched in cursor.fetchall()}


def query_lexemes(text: str, config: str) -> list[str]:
    """The lexemes of a query under ``config`` in the query's order, each as often as the query
    holds it: the tokens BM25 scores (a repeated one counts each time)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT t.lexeme FROM unnest(to_tsvector(%s::regconfig, %s)) t, unnest(t.positions) p ORDER BY p",
            [config, text],
        )
        return [row[0] for row in cursor.fetchall()]


def word_lexemes(words: list[str], config: str) -> list[tuple[str, str]]:
    """(word, lexeme) for each word that ``config`` turns into exactly one lexeme (stop words
    and words that yield none are left out), in the order given."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT w.word, l.lexemes[1] FROM unnest(%s::text[]) WITH ORDINALITY AS w(word, position), "
            "LATERAL (SELECT ARRAY(SELECT lexeme FROM unnest(to_tsvector(%s::regconfig, w.word))) AS lexemes) l "
            "WHERE cardinality(l.lexemes) = 1 ORDER BY w.position",
            [words, config],
        )
        return cursor.fetchall()


def unknown_terms(store_id: int, terms: list[str]) -> list[str]:
    """The terms absent from the store's vocabulary, in the order given."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT t.term FROM unnest(%s::text[]) WITH ORDINALITY AS t(term, position) WHERE NOT EXISTS "
            "(SELECT 1 FROM store_terms s WHERE s.store_id = %s AND s.term = t.term) ORDER BY t.position",
            [terms, store_id],
        )
        return [row[0] for row in cursor.fetchall()]


def surface_forms(store_id: int, terms: list[str], config: str, *, chunks: int) -> dict[str, str]:
    """For each term, the most frequent word of the indexed text that ``config`` reads as that
    term (ties in alphabetical order), counted in the ``chunks`` chunks where it is densest: a
    stem's word as people write it ("liabil" → "liability"). A term no chunk holds is left out.

    The chunks are taken in the order of the `chunk_terms_by_density` index, so only they are
    read: ordered by tf alone, every posting of the term was read and sorted (at a million
    chunks, 180-600 ms for a page of misspelt words). Their words come from the configuration's
    parser alone, and each distinct word goes through the dictionaries once (``ts_debug`` sent
    every word of every chunk through them: 42-113 ms for a page's corrections at 100k chunks,
    now 6-45 ms). A compound word ("well-known") counts only as its parts, as ``ts_debug`` reads
    it."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH parser AS MATERIALIZED (
                SELECT cfgparser AS oid FROM pg_ts_config WHERE oid = %(config)s::regconfig
            ), compounds AS MATERIALIZED (
                SELECT tokid FROM ts_token_type((SELECT oid FROM parser)) WHERE alias LIKE '%%hword'
            )
            SELECT DISTINCT ON (t.term) t.term, w.word
            FROM unnest(%(terms)s::text[]) AS t(term), LATERAL (
                SELECT lower(p.token) AS word, count(*) AS uses
                FROM (
                    SELECT c.content FROM chunk_terms ct JOIN chunks c ON c.id = ct.chunk_id
                    WHERE ct.store_id = %(store)s AND ct.term = t.term
                    ORDER BY {density_order("ct.")} LIMIT %(chunks)s
                ) held, ts_parse((SELECT oid FROM parser), held.content) p
                WHERE p.tokid NOT IN (SELECT tokid FROM compounds)
                GROUP BY lower(p.token)
            ) w
            WHERE t.term = ANY(tsvector_to_array(to_tsvector(%(config)s::regconfig, w.word)))
            ORDER BY t.term, w.uses DESC, w.word
            """,
            {"terms": terms, "store": store_id, "chunks": chunks, "config": config},
        )
        return dict(cursor.fetchall())


def similar_terms(
    store_id: int, thresholds: dict[str, float], config: str, limit: int = 50
) -> dict[str, list[tuple[str, int]]]:
    """For each lexeme of ``thresholds``, the vocabulary terms at least that similar to it in
    trigrams (candidates for an edit-distance check), most similar first, with their document
    frequencies. Only terms that ``config`` parses back to themselves: a correction is put into
    the query as text, and a stem that stems further would miss.

    The trigram index applies one threshold a statement (a setting), so there is one statement
    per distinct threshold, not one per misspelt word: the index rechecks every term sharing
    enough trigrams to reach the threshold, and a threshold as high as a lexeme allows
    (ranking.correction_similarity) spares it most of them."""
    similar: dict[str, list[tuple[str, int]]] = {lexeme: [] for lexeme in thresholds}
    groups: dict[float, list[str]] = {}
    for lexeme, threshold in thresholds.items():
        groups.setdefault(threshold, []).append(lexeme)
    with connection.cursor() as cursor:
        for threshold, lexemes in sorted(groups.items()):
            cursor.execute("SELECT set_config('pg_trgm.similarity_threshold', %s, false)", [str(threshold)])
            cursor.execute(
                "SELECT l.lexeme, s.term, s.df FROM unnest(%s::text[]) AS l(lexeme), "
                "LATERAL (SELECT term, df, similarity(term, l.lexeme) AS closeness FROM store_terms "
                "WHERE store_id = %s AND term %% l.lexeme "
                "AND ARRAY(SELECT lexeme FROM unnest(to_tsvector(%s::regconfig, term))) = ARRAY[term] "
                "ORDER BY closeness DESC, df DESC LIMIT %s) s "
                "ORDER BY s.closeness DESC, s.df DESC",
                [lexemes, store_id, config, limit],
            )
            for lexeme, term, df in cursor.fetchall():
                similar[lexeme].append((term, df))
    return similar
