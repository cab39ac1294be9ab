"""The raw statements of retrieval.sql that no search test pins down on its own."""

import random
import string

import pytest
from django.db import connection

from ingestion.services import IncomingFile, document_upload
from retrieval import sql
from retrieval.ranking import TYPO_SIMILARITY_FLOOR, correction_similarity
from stores.models import RagStore
from stores.services import store_create

pytestmark = pytest.mark.django_db(transaction=True)

# Stems with several written forms, capitals, accents, compounds, numbers, an address and a
# link: every kind of token the parser tells apart.
TEXTS = {
    "a.txt": "Running runs RUNNING runner. A well-known well, well known. Café cafés CAFÉ café.",
    "b.txt": "Policies policy POLICY policies' re-run 4-2 42 4.2 mail@example.com http://example.com/path",
    "c.txt": "Naïve naive naïvety déjà-vu déjà vu. Liability liabilities liability-free liable.",
}


def reference_surface_forms(store_id: int, terms: list[str], config: str, chunks: int) -> dict[str, str]:
    """What the parser and the dictionaries make of every word, through ts_debug: the slow,
    plain reading surface_forms must agree with."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT ON (t.term) t.term, lower(d.token) "
            "FROM unnest(%s::text[]) AS t(term), "
            "LATERAL (SELECT c.content FROM chunk_terms ct JOIN chunks c ON c.id = ct.chunk_id "
            "WHERE ct.store_id = %s AND ct.term = t.term "
            "ORDER BY ct.tf::float8 / greatest(ct.chunk_length, 1) DESC, ct.chunk_id LIMIT %s) held, "
            "LATERAL ts_debug(%s::regconfig, held.content) d WHERE t.term = ANY(d.lexemes) "
            "GROUP BY t.term, lower(d.token) ORDER BY t.term, count(*) DESC, lower(d.token)",
            [terms, store_id, chunks, config],
        )
        return dict(cursor.fetchall())


@pytest.mark.parametrize("index_config", ["english", "simple", "french"])
def test_surface_forms_read_the_words_as_the_dictionaries_do(fake_connection, ingest_now, index_config):
    store = store_create(
        name="forms",
        values={"embedding_connection_id": fake_connection.id, "chunk_size": 2000, "index_config": index_config},
    )
    files = [IncomingFile(filename=name, data=text.encode()) for name, text in TEXTS.items()]
    assert document_upload(store=store, files=files).refusal is None
    ingest_now()
    store = RagStore.objects.get(pk=store.pk)
    with connection.cursor() as cursor:
        cursor.execute("SELECT term FROM store_terms WHERE store_id = %s ORDER BY term", [store.pk])
        vocabulary = [term for (term,) in cursor.fetchall()]
    terms = vocabulary + ["absent"]
    forms = sql.surface_forms(store.pk, terms, store.index_config, chunks=10)
    assert forms == reference_surface_forms(store.pk, terms, store.index_config, 10)
    assert "absent" not in forms
    assert len(forms) > len(vocabulary) / 2
    if index_config == "english":
        assert forms["run"] == "running"
        assert forms["polici"] in {"policies", "policy"}
        assert forms["well"] == "well"


def edited(word: str, edits: int, rng: random.Random) -> str:
    """``word`` after ``edits`` random insertions, deletions or substitutions."""
    alphabet = string.ascii_lowercase + string.digits
    for _ in range(edits):
        position = rng.randrange(len(word) + 1)
        kind = rng.choice(("insert", "delete", "substitute") if position < len(word) else ("insert",))
        if kind == "insert":
            word = word[:position] + rng.choice(alphabet) + word[position:]
        else:
            word = word[:position] + ("" if kind == "delete" else rng.choice(alphabet)) + word[position + 1 :]
    return word


def test_no_term_within_the_allowed_edits_falls_below_the_correction_similarity():
    """A threshold the typo lookup raises above the floor must never hide a term it could correct
    to: checked against pg_trgm itself on random words, including words spelt with few letters
    (repeated trigrams) and edits spaced to break the most trigrams. (At the floor, terms less
    similar than it are not looked up, within the edits or not: the rule the lookup always had.)"""
    rng = random.Random(20261203)
    pairs = []
    for _ in range(3000):
        letters = rng.choice((string.ascii_lowercase, "ab", "abc0"))
        lexeme = "".join(rng.choice(letters) for _ in range(rng.randint(4, 16)))
        edits = 1 if len(lexeme) <= 7 else 2
        pairs.append((lexeme, edited(lexeme, rng.randint(1, edits), rng), correction_similarity(lexeme, edits)))
    for lexeme in ("abcdefghijkl", "abcdefghijklmno"):  # substitutions three apart: six trigrams broken
        pairs.append((lexeme, "x" + lexeme[1:3] + "x" + lexeme[4:], correction_similarity(lexeme, 2)))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.lexeme, p.term, similarity(p.term, p.lexeme), p.threshold "
            "FROM unnest(%s::text[], %s::text[], %s::float8[]) AS p(lexeme, term, threshold) "
            "WHERE p.threshold > %s AND similarity(p.term, p.lexeme) < p.threshold",
            [[p[0] for p in pairs], [p[1] for p in pairs], [p[2] for p in pairs], TYPO_SIMILARITY_FLOOR],
        )
        assert cursor.fetchall() == []
    assert sum(threshold > TYPO_SIMILARITY_FLOOR for _, _, threshold in pairs) > 1000
