"""Ingestion with real worker processes (Celery, not eager mode) and the real scheduler."""

import os
import signal
import threading
from pathlib import Path

import pytest
from django.db import connection

from ingestion.services import IncomingFile, document_upload
from stores.models import Chunk, Document, StoreTextStats
from stores.services import store_create
from tests.helpers import Processes, wait_until, worker_pid_of

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def store(fake_connection, fake_upstream):
    created = store_create(
        name="kb", values={"embedding_connection_id": fake_connection.id, "chunk_size": 200, "chunk_overlap": 0}
    )
    fake_upstream.forget_requests()
    return created


def upload(store, *named_texts):
    result = document_upload(store=store, files=[IncomingFile(filename=n, data=t.encode()) for n, t in named_texts])
    assert result.refusal is None
    return result.documents


def settled(*documents):
    return all(Document.objects.get(pk=d.pk).status in ("ready", "failed") for d in documents)


def vector_count(store_id):
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM chunk_embeddings_8 WHERE store_id = %s", [store_id])
        return cursor.fetchone()[0]


def test_a_worker_killed_mid_embedding_loses_nothing(processes, store, fake_upstream):
    text = "\n\n".join(f"Paragraph {n}: " + "words " * 25 for n in range(6))
    killed = threading.Event()
    first_worker = processes.start("worker")

    def kill_the_worker_once(request):
        if request.route == "openai.embeddings" and not killed.is_set():
            killed.set()
            Processes.kill_tree(first_worker)  # kill -9, mid-embedding, of every worker process

    fake_upstream.on_request = kill_the_worker_once
    (document,) = upload(store, ("book.md", text))
    wait_until(killed.is_set, message="the first embedding call")
    assert Document.objects.get(pk=document.pk).status == "processing"
    processes.start("worker")
    processes.start("scheduler")
    wait_until(lambda: settled(document), message="the document to settle")
    document = Document.objects.get(pk=document.pk)
    assert (document.status, document.attempts) == ("ready", 2)
    chunks = Chunk.objects.filter(document=document)
    assert chunks.count() == document.chunk_count == 6
    assert sorted(chunks.values_list("index", flat=True)) == list(range(6))
    assert vector_count(store.pk) == 6
    assert StoreTextStats.objects.get(store=store).chunk_count == 6


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_worker_stopped_mid_ingest_gives_its_claims_back_unspent(processes, store, fake_upstream, tmp_path, signum):
    output = tmp_path / "worker.log"
    worker = processes.start("worker", output=output)
    stop_sent = threading.Event()

    def stop_the_worker_mid_embedding(request):
        if request.route != "openai.embeddings" or stop_sent.is_set():
            return
        stop_sent.set()
        worker.send_signal(signum)  # as Ctrl-C or `docker stop` would
        # Answer only once the stop has reached the Celery processes: the job is then still in hand.
        wait_until(lambda: "Warm shutdown" in output.read_text(), timeout=30, message="the warm shutdown")

    fake_upstream.on_request = stop_the_worker_mid_embedding
    # Small documents: a claim takes 32 of them at once.
    documents = upload(store, *[(f"note{n}.md", f"# Note {n}\n\nA short note, number {n}.") for n in range(40)])
    assert worker.wait(timeout=60) == 0
    assert stop_sent.is_set()
    after_stop = list(Document.objects.values_list("status", "attempts", "lease_owner"))
    assert len(after_stop) == 40
    assert set(after_stop) <= {("pending", 0, ""), ("ready", 1, "")}
    assert ("pending", 0, "") in after_stop
    log = output.read_text()
    assert "put back in the queue" in log
    assert "WorkerLostError" not in log and "Traceback" not in log, log

    fake_upstream.on_request = None
    processes.start("worker")
    processes.start("scheduler")
    wait_until(lambda: settled(*documents), message="the documents to settle")
    assert set(Document.objects.values_list("status", "attempts")) == {("ready", 1)}


def test_two_workers_never_process_the_same_document(processes, store, fake_upstream):
    fake_upstream.configure("openai.embeddings", latency=0.1)
    # Larger than the small-document threshold, so each claim is a single document.
    documents = upload(store, *[(f"doc{n}.txt", f"document {n} " + "filler text " * 6000) for n in range(8)])
    processes.start("worker")
    processes.start("worker")
    wait_until(lambda: settled(*documents), timeout=180, message="all documents to settle")
    assert {(d.status, d.attempts) for d in Document.objects.all()} == {("ready", 1)}
    inputs = fake_upstream.inputs()
    assert len(inputs) == len(set(inputs)), "a text was embedded twice"
    assert vector_count(store.pk) == Chunk.objects.count()


def test_a_document_that_kills_its_worker_every_time_is_given_up(processes, store, fake_upstream, subprocess_env):
    processes.env["INGEST_MAX_ATTEMPTS"] = "2"

    def kill_whoever_embeds_poison(request):
        if request.route == "openai.embeddings" and any("POISON" in t for t in request.json()["input"]):
            os.kill(worker_pid_of(request, fake_upstream), signal.SIGKILL)

    fake_upstream.on_request = kill_whoever_embeds_poison
    (poison,) = upload(store, ("poison.txt", "POISON " + "x" * 70000))
    (healthy,) = upload(store, ("healthy.txt", "a perfectly ordinary document"))
    processes.start("worker")
    processes.start("scheduler")
    wait_until(lambda: settled(poison, healthy), timeout=120, message="both documents to settle")
    poison = Document.objects.get(pk=poison.pk)
    assert poison.status == "failed"
    assert poison.error == (
        "gave up after 2 attempts: the worker processing it stopped before finishing (its lease expired)"
    )
    assert Document.objects.get(pk=healthy.pk).status == "ready"


FILES = Path(__file__).parent / "files"


def test_hostile_files_fail_with_precise_reasons_while_the_worker_carries_on(processes, store):
    from tests.ingestion.files.make_hostile import many_pages_pdf

    # The page-count refusal takes about 1.2 s on a quiet machine (the parser's child starts and
    # walks 20,000 page references) and slow.pdf about 20 s: 5 s tells them apart under load too.
    processes.env["PDF_PARSE_TIMEOUT"] = "5s"
    hostile = {
        "self-referencing-page-tree.pdf": "the PDF page tree references itself",
        "huge-page-count.pdf": "the PDF has more than 2000 pages (the limit)",
        "slow.pdf": "PDF parsing took longer than 5s (PDF_PARSE_TIMEOUT)",
        "zip-bomb.docx": "word/document.xml is larger than 32 MiB uncompressed (the limit)",
        "fake-zip.docx": "the file is not a valid docx (not a zip archive)",
        "random-bytes.pdf": "the file is not a readable PDF",
        # OCR is on (the default): it reads the two painted pages and finds no words on them.
        "scanned.pdf": "OCR found no text on the 2 scanned pages",
        "encrypted.pdf": "the PDF is encrypted and cannot be read",
    }
    contents = {name: (FILES / name).read_bytes() for name in hostile if (FILES / name).exists()}
    contents["slow.pdf"] = many_pages_pdf(1500)
    contents["fake-zip.docx"] = b"PK\x03\x04 but nothing of a zip archive follows"
    # Past the sniffing at upload (a PDF header), so the parser is the one to refuse it.
    contents["random-bytes.pdf"] = b"%PDF-1.7\n" + contents["random-bytes.pdf"]
    assert set(contents) == set(hostile)
    # Refused at upload, before the worker sees them.
    refused = {
        "empty.txt": (b"", "empty_file"),
        "binary.txt": (bytes(range(256)) * 64, "unsupported_format"),
    }
    healthy = [
        IncomingFile(filename=f"fine-{n}.md", data=f"# Fine {n}\n\nAn ordinary document.".encode()) for n in range(3)
    ]
    files = [IncomingFile(filename=name, data=data) for name, data in contents.items()]
    files += [IncomingFile(filename=name, data=data) for name, (data, _) in refused.items()]
    # Text larger than the extracted-text cap can only fail, so it is never stored.
    huge = IncomingFile(
        filename="huge.txt", data=b"all work and no play makes jack a dull boy\n" * (30 * 1024 * 1024 // 43)
    )
    result = document_upload(store=store, files=files[:6] + healthy + [huge] + files[6:])
    assert result.refusal is None, result.refusal
    assert [(s.filename, s.code) for s in result.skipped] == [
        ("huge.txt", "text_too_large"),
        *((name, code) for name, (_, code) in refused.items()),
    ]
    processes.start("worker")
    wait_until(lambda: settled(*result.documents), timeout=240, message="every document to settle")
    outcome = {d.filename: (d.status, d.error) for d in Document.objects.all()}
    for name, reason in hostile.items():
        status, error = outcome[name]
        assert status == "failed", name
        assert error.startswith(reason), (name, error)
    assert [outcome[f"fine-{n}.md"] for n in range(3)] == [("ready", "")] * 3


def test_office_files_scans_and_their_refusals_settle_in_one_batch_while_the_worker_carries_on(processes, store):
    from tests.ingestion.files.make_documents import (
        bomb_png,
        book_epub,
        encrypted_xlsx,
        image_of_text,
        nested_eml,
        scanned_pdf_of,
        slides_pptx,
        workbook_xlsx,
    )

    # Too short for any page: a scanned page is skipped, and a mixed PDF keeps its text pages.
    processes.env["OCR_PAGE_TIMEOUT"] = "0.1s"
    mixed = scanned_pdf_of([["A page with text."], ["A scanned page."], ["More text."]], keep_text=(1, 3))
    files = {
        "deck.pptx": slides_pptx(),
        "budget.xlsx": workbook_xlsx(),
        "locked.xlsx": encrypted_xlsx(),
        "plates.epub": book_epub(images_only=True),
        "guide.epub": book_epub(),
        "message.eml": nested_eml(),
        "bomb.png": bomb_png(),
        # A full page of text: OCR takes well over 0.1 s on any machine (one line took less).
        "gate.png": image_of_text("\n".join(["Keep the gate closed."] * 40), "PNG"),
        "mixed.pdf": mixed,
        "fine.md": b"# Fine\n\nAn ordinary document.",
    }
    result = document_upload(store=store, files=[IncomingFile(filename=n, data=d) for n, d in files.items()])
    assert result.refusal is None and not result.skipped
    processes.start("worker")
    wait_until(lambda: settled(*result.documents), timeout=240, message="every document to settle")
    outcome = {d.filename: d for d in Document.objects.all()}
    failed = {name: d.error for name, d in outcome.items() if d.status == "failed"}
    assert failed == {
        "locked.xlsx": "the xlsx is encrypted (password-protected) and cannot be read; save it without a password",
        "plates.epub": (
            "the epub has no text: its 2 chapters show only images (1), as a scanned or picture book does; "
            "images inside an epub are not read by OCR"
        ),
        "bomb.png": (
            "the image has more than 60000000 pixels, the limit (OCR_MAX_PIXELS); it is refused as a possible "
            "decompression bomb"
        ),
        "gate.png": "the image has no readable text: page 1 was skipped: OCR took longer than 0.1s (OCR_PAGE_TIMEOUT)",
    }
    ready = {name: d for name, d in outcome.items() if d.status == "ready"}
    assert set(ready) == {"deck.pptx", "budget.xlsx", "guide.epub", "message.eml", "mixed.pdf", "fine.md"}
    assert ready["budget.xlsx"].warnings == ['sheet "Rates" is hidden and was not read']
    assert ready["mixed.pdf"].warnings == ["page 2 was skipped: OCR took longer than 0.1s (OCR_PAGE_TIMEOUT)"]
    assert sorted(Chunk.objects.filter(document=ready["mixed.pdf"]).values_list("page", flat=True)) == [1, 3]
    assert sorted(set(Chunk.objects.filter(document=ready["deck.pptx"]).values_list("page", flat=True))) == [1, 2]
