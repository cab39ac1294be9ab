"""An indexing language per store and the background rebuild of its lexical index, against
real PostgreSQL: stemming, the switch, concurrent searches and ingestion, and a change that
supersedes a running rebuild."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import pytest
from django.db import connection, connections, transaction

from ingestion.services import IncomingFile, document_upload
from retrieval.search import store_search
from stores import rebuild
from stores.models import Chunk, RagStore
from stores.rebuild import lexical_index_rebuild, lexical_index_state
from stores.services import store_create, store_update
from tests.helpers import in_thread

pytestmark = pytest.mark.django_db(transaction=True)

DOCUMENTS = {
    "policies.txt": "Our refund policies are generous. Shipping policies differ by country.",
    "heat.txt": "Heat-transfer coefficients of composite slabs were measured at Mach 5.8.",
    "other.txt": "Nothing about that subject; gardening and cooking only.",
}


@pytest.fixture
def build_store(fake_connection, ingest_now):
    """Stores start in `simple` here (the default is `english`), so a switch to `english` shows."""

    def build(texts: dict[str, str], *, name="kb", **settings) -> RagStore:
        values = {"embedding_connection_id": fake_connection.id, "index_config": "simple", **settings}
        store = store_create(name=name, values=values)
        upload(store, texts)
        ingest_now()
        return RagStore.objects.get(pk=store.pk)

    return build


def upload(store: RagStore, texts: dict[str, str]) -> None:
    files = [IncomingFile(filename=filename, data=text.encode()) for filename, text in texts.items()]
    assert document_upload(store=store, files=files).refusal is None


def lexical(store: RagStore, query: str, backend: str = "bm25") -> list[str]:
    store = RagStore.objects.get(pk=store.pk)
    result = store_search(store=store, query=query, overrides={"mode": "lexical", "backend": backend})
    return [hit.filename for hit in result.hits]


def change_index_config(store: RagStore, config: str) -> RagStore:
    return store_update(store=store, name=store.name, values={"index_config": config}).store


def lexical_index(store_id: int) -> dict:
    """Everything lexical a store owns, by chunk (document name, index), for comparisons."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT d.filename, c.index, c.token_count, c.tsv::text"
            " FROM chunks c JOIN documents d ON d.id = c.document_id WHERE c.store_id = %s",
            [store_id],
        )
        chunks = {(name, index): (tokens, tsv) for name, index, tokens, tsv in cursor.fetchall()}
        cursor.execute(
            "SELECT d.filename, c.index, t.term, t.tf, t.chunk_length FROM chunk_terms t"
            " JOIN chunks c ON c.id = t.chunk_id JOIN documents d ON d.id = c.document_id WHERE t.store_id = %s",
            [store_id],
        )
        postings = sorted(cursor.fetchall())
        cursor.execute("SELECT term, df FROM store_terms WHERE store_id = %s ORDER BY term", [store_id])
        terms = cursor.fetchall()
        cursor.execute("SELECT chunk_count, token_total FROM store_text_stats WHERE store_id = %s", [store_id])
        totals = cursor.fetchone()
    return {"chunks": chunks, "postings": postings, "terms": terms, "totals": totals}


def test_policies_are_found_from_policy_only_under_english(build_store):
    simple = build_store(DOCUMENTS, name="simple")
    english = build_store(DOCUMENTS, name="english", index_config="english")
    for backend in ("bm25", "pgvector"):
        assert lexical(simple, "policy", backend) == [], backend
        assert lexical(english, "policy", backend) == ["policies.txt"], backend
    result = store_search(store=english, query="policy", overrides={"mode": "lexical"})
    assert result.fts_config == "english"


def test_a_hyphenated_compound_matches_its_parts_and_counts_once(build_store):
    store = build_store(DOCUMENTS)
    assert lexical(store, "heat transfer") == ["heat.txt"]
    assert lexical(store, "heat-transfer") == ["heat.txt"]
    assert lexical(store, '"heat-transfer coefficients"') == ["heat.txt"]
    postings = dict((term, tf) for name, _, term, tf, _ in lexical_index(store.pk)["postings"] if name == "heat.txt")
    assert postings["heat"] == postings["transfer"] == 1
    assert "heat-transfer" not in postings and "5.8" not in postings


def test_changing_index_config_rebuilds_only_the_lexical_index(build_store):
    store = build_store(DOCUMENTS)
    chunks_before = list(Chunk.objects.filter(store=store).order_by("id").values_list("id", "content", "embedded_hash"))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT chunk_id, embedding::text FROM chunk_embeddings_8 WHERE store_id = %s ORDER BY 1", [store.pk]
        )
        vectors_before = cursor.fetchall()
    vector_hits = store_search(store=store, query="refund policy", overrides={"mode": "vector"}).hits

    store = change_index_config(store, "english")
    assert lexical_index_state(store).as_dict() == {
        "config": "simple",
        "target_config": "english",
        "state": "rebuilding",
        "chunks_done": None,
        "chunks_total": None,
    }
    assert lexical(store, "policy") == []  # still the old index until the rebuild ran
    assert lexical_index_rebuild(store_id=store.pk) == "rebuilt"

    store.refresh_from_db()
    assert (store.indexed_config, lexical_index_state(store).state) == ("english", "ready")
    assert lexical(store, "policy") == ["policies.txt"]
    assert list(Chunk.objects.filter(store=store).order_by("id").values_list("id", "content", "embedded_hash")) == (
        chunks_before
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT chunk_id, embedding::text FROM chunk_embeddings_8 WHERE store_id = %s ORDER BY 1", [store.pk]
        )
        assert cursor.fetchall() == vectors_before
    after = store_search(store=store, query="refund policy", overrides={"mode": "vector"}).hits
    assert [(h.chunk_id, h.distance) for h in after] == [(h.chunk_id, h.distance) for h in vector_hits]
    assert lexical_index_rebuild(store_id=store.pk) == "current"


def test_term_statistics_after_a_rebuild_equal_a_build_from_scratch(build_store):
    rebuilt = build_store(DOCUMENTS, name="rebuilt")
    change_index_config(rebuilt, "english")
    lexical_index_rebuild(store_id=rebuilt.pk)
    scratch = build_store(DOCUMENTS, name="scratch", index_config="english")
    assert lexical_index(rebuilt.pk) == lexical_index(scratch.pk)
    assert lexical_index(rebuilt.pk)["terms"]  # not two empty indexes


class HeldChunk:
    """Holds a row lock on one chunk from another connection, so a rebuild that reaches it waits
    there, mid-way, with its earlier batches written but not committed."""

    def __init__(self, chunk_id: int):
        self.chunk_id = chunk_id
        self.locked = threading.Event()
        self.release = threading.Event()
        self.thread = threading.Thread(target=self._hold)

    def _hold(self) -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT 1 FROM chunks WHERE id = %s FOR UPDATE", [self.chunk_id])
                self.locked.set()
                self.release.wait(30)
        finally:
            connections.close_all()

    def __enter__(self):
        self.thread.start()
        assert self.locked.wait(10)
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.thread.join(30)


def wait_for_progress(store_id: int, done: int) -> None:
    for _ in range(200):
        progress = rebuild._read_progress(store_id)
        if progress and progress["done"] >= done:
            return
        threading.Event().wait(0.05)
    raise AssertionError(f"the rebuild never reported {done} chunks done")


@pytest.fixture
def many_chunks(build_store, monkeypatch):
    """A store of several rebuild batches (a batch of 2 chunks here)."""
    monkeypatch.setattr(rebuild, "REBUILD_BATCH", 2)
    texts = {f"{n}.txt": f"policies number {n} of the handbook" for n in range(6)}
    return build_store(texts)


@contextmanager
def rebuild_held_mid_way(store: RagStore, config: str):
    """Changes index_config and runs the rebuild in a thread, held by a row lock on the store's
    last chunk after its first batches; yields (thread, outcome) and lets it go on exit."""
    last = Chunk.objects.filter(store=store).order_by("-id").values_list("id", flat=True).first()
    change_index_config(store, config)
    with HeldChunk(last):
        thread, outcome = in_thread(lambda: lexical_index_rebuild(store_id=store.pk))
        wait_for_progress(store.pk, 2)
        yield thread, outcome


def test_the_store_stays_searchable_with_the_old_index_during_a_rebuild(many_chunks):
    store = many_chunks
    old_hits = lexical(store, "policies")
    with rebuild_held_mid_way(store, "english") as (thread, outcome):
        state = lexical_index_state(RagStore.objects.get(pk=store.pk))
        assert (state.state, state.chunks_done, state.chunks_total) == ("rebuilding", 4, 6)
        assert lexical(store, "policies") == old_hits  # the old index, complete
        assert lexical(store, "policy") == []
    thread.join(30)
    assert outcome == {"value": "rebuilt"}
    assert sorted(lexical(store, "policy")) == sorted(old_hits)


def test_a_second_change_mid_rebuild_starts_over_with_the_newer_configuration(many_chunks, build_store):
    store = many_chunks
    with rebuild_held_mid_way(store, "english") as (thread, outcome):
        change_index_config(RagStore.objects.get(pk=store.pk), "german")
        # A second worker picking up the second change finds the first rebuild running.
        assert lexical_index_rebuild(store_id=store.pk) == "busy"
    thread.join(30)
    assert outcome == {"value": "rebuilt"}
    store.refresh_from_db()
    assert store.indexed_config == "german"
    scratch = build_store(
        {f"{n}.txt": f"policies number {n} of the handbook" for n in range(6)}, name="de", index_config="german"
    )
    assert lexical_index(store.pk) == lexical_index(scratch.pk)


def test_a_document_ingested_during_a_rebuild_lands_in_the_new_index(many_chunks, ingest_now):
    store = many_chunks
    with rebuild_held_mid_way(store, "english") as (rebuilding, rebuilt):
        upload(store, {"late.txt": "refund policies of late documents"})
        ingesting, ingested = in_thread(ingest_now)
        ingesting.join(1)
        assert ingesting.is_alive()  # waiting for the rebuild to switch
    rebuilding.join(30)
    ingesting.join(30)
    assert rebuilt == {"value": "rebuilt"} and "error" not in ingested
    assert "late.txt" in lexical(store, "refund policy")
    late = lexical_index(store.pk)
    scratch_terms = {term for name, _, term, _, _ in late["postings"] if name == "late.txt"}
    assert {"polici", "refund"} <= scratch_terms


def test_the_sweep_finds_stores_whose_rebuild_was_left_undone(build_store):
    store = build_store(DOCUMENTS)
    assert rebuild.stores_needing_rebuild() == []
    RagStore.objects.filter(pk=store.pk).update(index_config="english")  # as if the worker died
    assert rebuild.stores_needing_rebuild() == [store.pk]
    lexical_index_rebuild(store_id=store.pk)
    assert rebuild.stores_needing_rebuild() == []


def test_an_index_from_before_punctuation_split_words_is_searched_and_then_rebuilt(build_store):
    store = build_store(DOCUMENTS)
    with connection.cursor() as cursor:  # what migration 0007 leaves: the tsvector of the raw text
        cursor.execute("UPDATE chunks SET tsv = to_tsvector('simple', content) WHERE store_id = %s", [store.pk])
    RagStore.objects.filter(pk=store.pk).update(indexed_config="")
    store.refresh_from_db()
    assert (lexical_index_state(store).state, store.query_config) == ("rebuilding", "simple")
    assert lexical(store, "heat transfer") == ["heat.txt"]  # the compound's parts were indexed too
    assert rebuild.stores_needing_rebuild() == [store.pk]
    assert lexical_index_rebuild(store_id=store.pk) == "rebuilt"
    store.refresh_from_db()
    assert (store.indexed_config, lexical_index_state(store).state) == ("simple", "ready")
    postings = {term for name, _, term, _, _ in lexical_index(store.pk)["postings"] if name == "heat.txt"}
    assert "heat-transfer" not in postings and {"heat", "transfer"} <= postings
