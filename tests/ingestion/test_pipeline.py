"""The ingestion pipeline run in-process (the worker's code without a worker process)."""

import logging
import threading
import time

import pytest
from django.db import connection

from ingestion.services import IncomingFile, document_reprocess, document_upload
from stores.choices import SECTION_MAX_LENGTH
from stores.models import Chunk, ChunkTerm, Document, RagStore, StoreTextStats
from stores.services import document_delete, store_create, store_delete
from tests.helpers import counted


@pytest.fixture
def make_store(fake_connection, fake_upstream):
    """A store on the fake upstream; the width probe made while creating it is not counted."""

    def create(**values):
        store = store_create(
            name=values.pop("name", "kb"), values={"embedding_connection_id": fake_connection.id, **values}
        )
        fake_upstream.forget_requests()
        return store

    return create


def add(store, *named_texts):
    result = document_upload(store=store, files=[IncomingFile(filename=n, data=t.encode()) for n, t in named_texts])
    assert result.refusal is None, result.refusal
    return result.documents


def refreshed(document):
    return Document.objects.get(pk=document.pk)


def vector_rows(width=8):
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM chunk_embeddings_{width}")
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_small_documents_share_one_embedding_call(make_store, fake_upstream, ingest_now):
    store = make_store()
    documents = add(store, *[(f"{n}.txt", f"document number {n}") for n in range(5)])
    ingest_now()
    assert [refreshed(d).status for d in documents] == ["ready"] * 5
    assert fake_upstream.calls("openai.embeddings") == 1
    assert sorted(fake_upstream.inputs()) == sorted(f"{n}.txt\ndocument number {n}" for n in range(5))


@pytest.mark.django_db(transaction=True)
def test_identical_texts_are_embedded_once(make_store, fake_upstream, ingest_now):
    store = make_store(contextual_chunks=False)
    add(store, ("a.txt", "the same paragraph"), ("b.txt", "the  same\nparagraph "))
    ingest_now()
    assert fake_upstream.inputs() == ["the same paragraph"]
    assert Chunk.objects.count() == 2
    assert vector_rows() == 2


@pytest.mark.django_db(transaction=True)
def test_a_ready_document_reports_its_counts(make_store, ingest_now):
    store = make_store(chunk_size=200, chunk_overlap=0)
    body = "\n\n".join(f"Paragraph {n} " + "word " * 30 for n in range(4))
    (document,) = add(store, ("long.md", body))
    ingest_now()
    document = refreshed(document)
    assert (document.status, document.progress_percent, document.error) == ("ready", 100, "")
    assert document.chunk_count == Chunk.objects.filter(document=document).count() == 4
    assert document.page_count is None
    assert RagStore.objects.get(pk=store.pk).dimensions == 8
    stats = StoreTextStats.objects.get(store=store)
    assert stats.chunk_count == 4
    assert stats.token_total == sum(Chunk.objects.values_list("token_count", flat=True)) == 4 * 32


@pytest.mark.django_db(transaction=True)
def test_a_heading_longer_than_a_section_holds_is_cut_and_the_document_indexed(make_store, ingest_now):
    store = make_store()
    heading = "keyword " * 2000
    (document,) = add(store, ("index.html", f"<html><body><h1>{heading}</h1><p>the body text</p></body></html>"))
    ingest_now()
    assert refreshed(document).status == "ready", refreshed(document).error
    (section,) = Chunk.objects.filter(document=document).values_list("section", flat=True).distinct()
    assert len(section) == SECTION_MAX_LENGTH and section.startswith("keyword keyword") and section.endswith("…")


@pytest.mark.django_db(transaction=True)
def test_transient_upstream_failures_are_retried(make_store, fake_upstream, ingest_now):
    store = make_store()
    fake_upstream.configure("openai.embeddings", status=503, times=2)
    (document,) = add(store, ("a.txt", "retry me"))
    ingest_now()
    assert refreshed(document).status == "ready"
    assert fake_upstream.calls("openai.embeddings") == 3  # two failures, then a success


@pytest.mark.django_db(transaction=True)
def test_a_rate_limit_is_retried_after_its_retry_after(make_store, fake_upstream, ingest_now):
    store = make_store()
    fake_upstream.configure("openai.embeddings", status=429, times=1, retry_after=2)
    fake_upstream.forget_requests()  # the store's width probe
    (document,) = add(store, ("a.txt", "retry me later"))
    ingest_now()
    assert refreshed(document).status == "ready"
    refused, embedded = fake_upstream.requests_to("openai.embeddings")
    assert embedded.received - refused.received >= 2


@pytest.mark.django_db(transaction=True)
def test_a_retry_after_past_the_jobs_deadline_fails_the_document_at_once(make_store, fake_upstream, ingest_now):
    store = make_store()
    fake_upstream.configure("openai.embeddings", status=503, retry_after=24 * 3600)
    fake_upstream.forget_requests()
    (document,) = add(store, ("a.txt", "not today"))
    ingest_now()
    assert refreshed(document).error.startswith("embedding failed: openai answered HTTP 503")
    assert fake_upstream.calls("openai.embeddings") == 1


@pytest.mark.django_db(transaction=True)
def test_a_broken_upstream_fails_the_document_keeping_its_progress(make_store, fake_upstream, ingest_now):
    store = make_store()
    fake_upstream.configure("openai.embeddings", status=503)
    (document,) = add(store, ("a.txt", "never embedded"))
    ingest_now()
    document = refreshed(document)
    assert document.status == "failed"
    assert document.error.startswith("embedding failed after 4 attempts: openai answered HTTP 503")
    assert document.progress_percent == 20
    assert not Chunk.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_non_retryable_error_is_not_retried(make_store, fake_upstream, ingest_now):
    store = make_store()
    fake_upstream.configure("openai.embeddings", status=400)
    (document,) = add(store, ("a.txt", "bad request"))
    ingest_now()
    assert refreshed(document).error.startswith("embedding failed: openai answered HTTP 400")
    assert fake_upstream.calls("openai.embeddings") == 1


@pytest.mark.django_db(transaction=True)
def test_a_too_wide_model_found_at_first_ingest_fails_naming_both_numbers(make_store, fake_upstream, ingest_now):
    fake_upstream.configure("openai.embeddings", status=503)
    store = make_store()  # the width probe could not reach the model: saved anyway
    fake_upstream.configure("openai.embeddings", status=None, width=4100)
    (document,) = add(store, ("a.txt", "wide"))
    ingest_now()
    document = refreshed(document)
    assert document.status == "failed"
    assert "returns 4100 dimensions; ragmux indexes at most 4000" in document.error
    assert RagStore.objects.get(pk=store.pk).dimensions is None


@pytest.mark.django_db(transaction=True)
def test_a_model_whose_width_changed_fails_against_the_store(make_store, fake_upstream, ingest_now):
    store = make_store()
    add(store, ("a.txt", "first"))
    ingest_now()
    fake_upstream.configure("openai.embeddings", width=16)
    (document,) = add(store, ("b.txt", "second"))
    ingest_now()
    assert refreshed(document).error == (
        "the embedding model returned 16 dimensions but this store holds 8-dimensional vectors"
    )


@pytest.mark.django_db(transaction=True)
def test_too_many_chunks_fail_before_any_embedding(make_store, fake_upstream, ingest_now, settings):
    settings.MAX_CHUNKS_PER_DOCUMENT = 2
    store = make_store(chunk_size=200, chunk_overlap=0)
    (document,) = add(store, ("many.txt", "\n\n".join("paragraph " * 18 for _ in range(3))))
    ingest_now()
    document = refreshed(document)
    assert document.error == (
        "the document splits into 3 chunks, more than MAX_CHUNKS_PER_DOCUMENT (2); "
        "raise the store's chunk_size or the limit"
    )
    assert document.progress_percent == 10
    assert fake_upstream.calls() == 0


@pytest.mark.django_db(transaction=True)
def test_reprocess_after_a_search_setting_change_makes_no_embedding_calls(make_store, fake_upstream, ingest_now, api):
    store = make_store(chunk_size=200, chunk_overlap=0)
    add(store, ("a.md", "\n\n".join(f"Section text {n} " + "lorem " * 30 for n in range(5))), ("b.txt", "short one"))
    ingest_now()
    calls = fake_upstream.calls("openai.embeddings")
    admin = api("admin")
    assert admin.patch(f"/admin/api/rag-stores/{store.pk}", json={"top_k": 9}).json()["reprocess_recommended"] is False
    admin.post(f"/admin/api/rag-stores/{store.pk}/reprocess")
    ingest_now()
    assert fake_upstream.calls("openai.embeddings") == calls
    assert set(Document.objects.values_list("status", flat=True)) == {"ready"}
    assert vector_rows() == Chunk.objects.count() == 6


@pytest.mark.django_db(transaction=True)
def test_reprocess_after_a_chunk_size_change_embeds_only_new_texts(make_store, fake_upstream, ingest_now, api):
    store = make_store(chunk_size=200, chunk_overlap=0)
    add(store, ("a.md", "\n\n".join(f"Section text {n} " + "lorem " * 30 for n in range(5))), ("b.txt", "short one"))
    ingest_now()
    before = set(Chunk.objects.values_list("embedded_hash", flat=True))
    seen = len(fake_upstream.inputs())
    admin = api("admin")
    changed = admin.patch(f"/admin/api/rag-stores/{store.pk}", json={"chunk_size": 400})
    assert changed.json()["reprocess_recommended"] is True
    admin.post(f"/admin/api/rag-stores/{store.pk}/reprocess")
    ingest_now()
    after = set(Chunk.objects.values_list("embedded_hash", flat=True))
    new_inputs = fake_upstream.inputs()[seen:]
    assert len(new_inputs) == len(after - before) > 0
    assert "b.txt\nshort one" not in new_inputs  # its chunk did not change, so its vector was reused
    assert vector_rows() == Chunk.objects.count()


def embed_tokens(source: str) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("ragmux_ingest_embed_tokens_total", {"source": source}) or 0


@pytest.mark.django_db(transaction=True)
def test_tokens_are_counted_by_source_and_logged(make_store, fake_upstream, ingest_now, caplog):
    before = {source: embed_tokens(source) for source in ("reported", "estimated")}
    store = make_store()
    with caplog.at_level(logging.INFO, logger="ragmux.ingestion"):
        add(store, ("a.txt", "one two three"))
        ingest_now()  # the fake reports usage: one token per word of "a.txt\none two three"
        fake_upstream.configure("openai.embeddings", omit_usage=True)
        add(store, ("b.txt", "four five six seven"))
        ingest_now()  # no usage: estimated as characters / 4
    assert embed_tokens("reported") - before["reported"] == 4
    assert embed_tokens("estimated") - before["estimated"] == 7  # ceil(len("b.txt\nfour five six seven") / 4)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("document ingested")]
    assert [line.split(" pages=")[0].split("chunks=")[1] for line in lines] == ["1 embed_tokens=4", "1 embed_tokens=7"]
    assert all("parse_ms=" in line and "embed_ms=" in line and "commit_ms=" in line for line in lines)


@pytest.mark.django_db(transaction=True)
def test_a_document_deleted_while_it_is_embedded_leaves_nothing_behind(make_store, fake_upstream, ingest_now, settings):
    settings.INGEST_LEASE = 3  # renewed every second, so the worker notices quickly
    store = make_store()
    (doomed,) = add(store, ("doomed.txt", "slow to embed"))
    lost_before = counted("ragmux_ingest_lease_lost_total")
    fake_upstream.configure("openai.embeddings", latency=2.5)
    worker = threading.Thread(target=ingest_now)
    worker.start()
    while refreshed(doomed).progress_percent < 20:
        time.sleep(0.05)
    document_delete(document=refreshed(doomed))
    worker.join(timeout=30)
    assert counted("ragmux_ingest_lease_lost_total") == lost_before + 1
    assert not Chunk.objects.exists()
    assert not ChunkTerm.objects.exists()
    assert vector_rows() == 0
    # Nothing was ever counted: the store has no statistics, or statistics of nothing.
    assert not StoreTextStats.objects.filter(store=store).exclude(chunk_count=0, token_total=0).exists()


@pytest.mark.django_db(transaction=True)
def test_a_worker_whose_claim_moved_on_writes_nothing(make_store, fake_upstream, ingest_now):
    store = make_store()
    (document,) = add(store, ("a.txt", "reprocessed mid-flight"))
    jobs_before = {outcome: counted("ragmux_ingest_jobs_total", outcome=outcome) for outcome in ("ready", "lease_lost")}
    fake_upstream.configure("openai.embeddings", latency=1.5)
    worker = threading.Thread(target=ingest_now)
    worker.start()
    while refreshed(document).progress_percent < 20:
        time.sleep(0.05)
    document_reprocess(document=refreshed(document))  # moves the fencing token on
    worker.join(timeout=60)
    assert counted("ragmux_ingest_jobs_total", outcome="lease_lost") == jobs_before["lease_lost"] + 1
    fake_upstream.configure("openai.embeddings", latency=0)
    ingest_now()
    assert counted("ragmux_ingest_jobs_total", outcome="ready") == jobs_before["ready"] + 1
    assert refreshed(document).status == "ready"
    assert Chunk.objects.filter(document=document).count() == 1
    assert vector_rows() == 1


@pytest.mark.django_db(transaction=True)
def test_a_job_that_outlives_its_timeout_fails(make_store, fake_upstream, ingest_now, settings):
    settings.INGEST_JOB_TIMEOUT = 1
    store = make_store(chunk_size=200, chunk_overlap=0)
    fake_upstream.configure("openai.embeddings", latency=1.2)
    text = " ".join(f"w{n}" for n in range(30000))  # about 1000 distinct chunks: several batches
    small, large = add(store, ("small.txt", "one"), ("large.txt", text))
    ingest_now()
    assert refreshed(small).status == "ready"
    large = refreshed(large)
    assert (large.status, large.error) == ("failed", "ingestion took longer than 1s (INGEST_JOB_TIMEOUT)")
    assert 20 < large.progress_percent < 99  # some, not all, of its embedding batches were done


@pytest.mark.django_db(transaction=True)
def test_a_store_deleted_while_its_documents_ingest_ends_them_quietly(make_store, fake_upstream, ingest_now, caplog):
    store = make_store()
    documents = add(store, ("a.txt", "first of two"), ("b.txt", "second of two"))

    def delete_the_store(request):
        if request.path.endswith("/embeddings"):
            store_delete(store=store)
            connection.close()

    fake_upstream.on_request = delete_the_store
    with caplog.at_level(logging.DEBUG):
        ingest_now()

    assert not Document.objects.filter(pk__in=[d.pk for d in documents]).exists()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert not any(r.exc_info for r in caplog.records)
