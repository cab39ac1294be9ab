import threading

import pytest
from django.db import connection, connections

from stores.vector_tables import WidthNotSupported, ensure_embedding_table, existing_widths


def index_definition(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [name])
        row = cursor.fetchone()
    return row[0] if row else ""


@pytest.mark.django_db
def test_a_width_gets_its_table_with_an_hnsw_cosine_index():
    assert ensure_embedding_table(384) == "chunk_embeddings_384"
    definition = index_definition("chunk_embeddings_384_hnsw")
    assert "USING hnsw (embedding vector_cosine_ops)" in definition


@pytest.mark.django_db
def test_widths_above_2000_are_indexed_as_halfvec():
    ensure_embedding_table(3072)
    assert "USING hnsw (embedding halfvec_cosine_ops)" in index_definition("chunk_embeddings_3072_hnsw")


@pytest.mark.django_db
@pytest.mark.parametrize("width", [4001, 0])
def test_unindexable_widths_are_refused_naming_width_and_limit(width):
    with pytest.raises(WidthNotSupported, match=f"returns {width} dimensions; ragmux indexes at most 4000"):
        ensure_embedding_table(width)


@pytest.mark.django_db(transaction=True)
def test_concurrent_first_use_creates_the_table_once():
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def first_ingest():
        try:
            barrier.wait()
            ensure_embedding_table(512)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=first_ingest) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert 512 in existing_widths()
