"""The raw statements of retrieval.sql that no search test pins down on its own."""

import pytest
from django.db import connection

from ingestion.services import IncomingFile, document_upload
from retrieval import sql
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
