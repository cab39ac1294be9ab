"""The index writer under concurrency, against real PostgreSQL: writers into one store write
their chunks, postings and vectors side by side and queue only for the statistics, which stay
exact under writes, reprocessing and deletes; a lexical rebuild waits for the writers in flight
and the writers that come after it wait for it."""

from __future__ import annotations

import random
import threading

import pytest
from django.db import connection, connections, transaction

from ingestion.chunking import text_hash
from stores import index
from stores.lexical import lexical_text
from stores.models import Document, RagStore
from stores.rebuild import lexical_index_rebuild
from stores.services import document_delete
from stores.vector_tables import ensure_embedding_table
from tests.factories import DocumentFactory, StoreFactory
from tests.helpers import in_thread

pytestmark = pytest.mark.django_db(transaction=True)

DIMENSIONS = 8
WORDS = "refund policies shipping country heat transfer coefficients composite slabs measured".split()


@pytest.fixture
def store() -> RagStore:
    ensure_embedding_table(DIMENSIONS)
    return StoreFactory(dimensions=DIMENSIONS, index_config="simple", indexed_config="simple")


def chunk_rows(document: Document, seed: int) -> list[index.ChunkRow]:
    """Three chunks drawn from a small vocabulary, so documents share most of their terms."""
    rng = random.Random(seed)
    contents = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) for _ in range(3)]
    return [
        index.ChunkRow(document_id=document.pk, index=n, content=c, section="", page=None, embedded_hash=text_hash(c))
        for n, c in enumerate(contents)
    ]


def vectors(rows: list[index.ChunkRow]) -> list[str]:
    rng = random.Random(len(rows))
    return [index.format_vector([rng.random() for _ in range(DIMENSIONS)]) for _ in rows]


def write_document(store: RagStore, document: Document, seed: int) -> bool:
    """Writes (or rewrites) a document as ingestion's commit does; False if it was deleted."""
    with transaction.atomic():
        index.lock_store_for_writing(store.pk)
        if Document.objects.select_for_update().filter(pk=document.pk).first() is None:
            return False
        rows = chunk_rows(document, seed)
        index.replace_document(
            store_id=store.pk,
            dimensions=DIMENSIONS,
            model_key="test",
            document_id=document.pk,
            rows=rows,
            vectors=vectors(rows),
        )
    return True


class PausedWriter:
    """Writes a new document's chunks, postings and vectors in a transaction of its own thread,
    and waits there, before the statistics, until the block ends."""

    def __init__(self, store: RagStore, document: Document):
        self.store = store
        self.document = document
        self.written = threading.Event()
        self.go = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._write)

    def _write(self) -> None:
        try:
            with transaction.atomic():
                index.lock_store_for_writing(self.store.pk)
                rows = chunk_rows(self.document, seed=0)
                chunk_ids = index.write_chunks(store_id=self.store.pk, rows=rows)
                index.write_vectors(
                    store_id=self.store.pk,
                    dimensions=DIMENSIONS,
                    model_key="test",
                    chunk_ids=chunk_ids,
                    rows=rows,
                    vectors=vectors(rows),
                )
                self.written.set()
                self.go.wait(60)
                index.add_to_statistics(store_id=self.store.pk, chunk_ids=chunk_ids)
        except BaseException as exc:  # reported by the test's assertion, not lost in the thread
            self.error = exc
        finally:
            connections.close_all()

    def __enter__(self) -> PausedWriter:
        self.thread.start()
        assert self.written.wait(30)
        return self

    def __exit__(self, *exc_info) -> None:
        self.go.set()
        self.thread.join(60)
        assert not self.thread.is_alive()


def statistics(store_id: int) -> tuple[list, tuple]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT term, df FROM store_terms WHERE store_id = %s ORDER BY term", [store_id])
        terms = cursor.fetchall()
        cursor.execute("SELECT chunk_count, token_total FROM store_text_stats WHERE store_id = %s", [store_id])
        return terms, cursor.fetchone()


def recounted(store_id: int) -> tuple[list, tuple]:
    """The statistics the rebuild's recount makes from the postings and chunks (rolled back)."""
    with transaction.atomic():
        index.lock_store_for_rebuild(store_id)
        index.recount_statistics(store_id=store_id)
        counted = statistics(store_id)
        transaction.set_rollback(True)
    return counted


def waiting_for_index_lock(store_id: int, count: int) -> None:
    """Returns once ``count`` transactions wait for the store's index lock."""
    for _ in range(600):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                " AND classid = %s AND objid = %s",
                [index._INDEX_LOCK_NAMESPACE, store_id],
            )
            if cursor.fetchone()[0] >= count:
                return
        threading.Event().wait(0.05)
    raise AssertionError(f"{count} transaction(s) never waited for the store's index lock")


def test_writers_write_side_by_side_and_queue_only_for_the_statistics(store):
    new, added, reprocessed, deleted = DocumentFactory.create_batch(4, store=store)
    write_document(store, reprocessed, seed=1)
    write_document(store, deleted, seed=2)
    with PausedWriter(store, new) as paused:
        others, outcome = in_thread(
            lambda: (
                write_document(store, added, seed=3),
                write_document(store, reprocessed, seed=4),
                document_delete(document=deleted),
            )
        )
        # All of it commits while the paused writer's chunks and vectors are written, uncommitted.
        others.join(60)
        assert not others.is_alive()
    assert outcome == {"value": (True, True, None)} and paused.error is None
    terms, totals = statistics(store.pk)
    assert totals[0] == 9 and len(terms) > 5
    assert (terms, totals) == recounted(store.pk)


def test_concurrent_writers_reprocessing_and_deletes_keep_the_statistics_exact(store):
    documents = DocumentFactory.create_batch(8, store=store)
    go = threading.Barrier(3)

    def writer(mine: list[Document], offset: int) -> None:
        go.wait(30)
        for round_ in range(3):  # the second and third rounds reprocess
            for document in mine:
                write_document(store, document, seed=offset + 10 * round_ + document.pk)

    def deleter() -> None:
        go.wait(30)
        for document in documents[::3]:
            document_delete(document=document)

    threads = [
        in_thread(lambda: writer(documents[0::2], 100)),
        in_thread(lambda: writer(documents[1::2], 200)),
        in_thread(deleter),
    ]
    for thread, _ in threads:
        thread.join(120)
    assert [outcome for _, outcome in threads] == [{"value": None}] * 3
    assert Document.objects.filter(store=store).count() == 5
    terms, totals = statistics(store.pk)
    assert totals[0] == 15 and terms
    assert (terms, totals) == recounted(store.pk)


def test_a_rebuild_waits_for_the_writers_in_flight_and_later_writers_wait_for_it(store):
    written, in_flight, late = DocumentFactory.create_batch(3, store=store)
    write_document(store, written, seed=1)
    with PausedWriter(store, in_flight):
        RagStore.objects.filter(pk=store.pk).update(index_config="english")
        rebuilding, rebuilt = in_thread(lambda: lexical_index_rebuild(store_id=store.pk))
        waiting_for_index_lock(store.pk, 1)
        writing, wrote = in_thread(lambda: write_document(store, late, seed=2))
        waiting_for_index_lock(store.pk, 2)  # queued behind the rebuild
        assert rebuilding.is_alive() and writing.is_alive()
    rebuilding.join(60)
    writing.join(60)
    assert rebuilt == {"value": "rebuilt"} and wrote == {"value": True}
    with connection.cursor() as cursor:
        cursor.execute("SELECT content, tsv::text FROM chunks WHERE store_id = %s", [store.pk])
        chunks = cursor.fetchall()
        for content, tsv in chunks:  # the rebuild retokenised the first two, the late one followed it
            cursor.execute("SELECT to_tsvector('english', %s)::text", [lexical_text(content)])
            assert tsv == cursor.fetchone()[0]
    assert len(chunks) == 9 and any("'polici'" in tsv for _, tsv in chunks)  # stemmed: not `simple`
    assert statistics(store.pk) == recounted(store.pk)
