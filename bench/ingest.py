"""Ingestion throughput: a BEIR corpus through the real pipeline (upload → Celery worker →
parse → chunk → local embedding model → PostgreSQL), against the raw embedder on the same texts.

    python bench/ingest.py [--dataset DIR] [--limit N] [--smoke]

Timed from the first upload to the last document settled. The raw embedder embeds the same
texts the pipeline embedded, split over INGEST_WORKERS processes with the worker's thread
count and batch size, so the ratio is the pipeline's overhead. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from harness import (
    DEFAULT_DATASET,
    BenchEnvironment,
    document_text,
    fresh_store,
    load_beir,
    local_connection,
    print_table,
    report,
    wait_for,
)

UPLOAD_BATCH = 50


_models: dict[int, object] = {}


def _raw_embed(args: tuple[list[str], int, int]) -> int:
    texts, threads, batch = args
    from gateway.connections.providers.local_model import LocalModel

    model = _models.get(threads) or _models.setdefault(threads, LocalModel(threads=threads))
    for start in range(0, len(texts), batch):
        model.embed(texts[start : start + batch])
    return len(texts)


def _warm_up(threads: int, batch: int) -> None:
    import django

    django.setup()
    _raw_embed((["warm up"] * batch, threads, batch))


def raw_embedder_seconds(texts: list[str], *, workers: int, threads: int, batch: int) -> float:
    """Time to embed ``texts`` with the bare model, split like the workers split their jobs."""
    shares = [texts[n::workers] for n in range(workers)]
    with ProcessPoolExecutor(max_workers=workers, initializer=_warm_up, initargs=(threads, batch)) as pool:
        started = time.monotonic()
        list(pool.map(_raw_embed, [(share, threads, batch) for share in shares]))
        return time.monotonic() - started


def upload_paced(store, corpus: list[dict], *, as_text: bool = False) -> dict[str, str]:
    """Uploads in small batches, keeping the pending backlog under MAX_PENDING_DOCUMENTS. Every
    document carries its BEIR id as ``source``.

    By default each document is a file ``<_id>.txt``; ``as_text`` sends it through the text
    endpoint instead, titled by its BEIR title (so its file name is ``<title>.txt``). Returns
    BEIR id → reason for the documents skipped at upload (duplicates of an earlier document's
    bytes; empty documents, which both the upload and the text endpoint refuse before storing
    anything)."""
    from django.conf import settings

    from ingestion.services import IncomingFile, document_ingest_text, document_upload
    from ragmux.core.errors import InvalidInput
    from stores.models import Document

    skipped = {}
    for start in range(0, len(corpus), UPLOAD_BATCH):
        wait_for(
            lambda: Document.objects.filter(status="pending").count() + UPLOAD_BATCH <= settings.MAX_PENDING_DOCUMENTS,
            timeout=3600,
            poll=0.2,
        )
        for document in corpus[start : start + UPLOAD_BATCH]:  # one request per document, as an uploader would
            source, text = document["_id"], document_text(document)
            try:
                if as_text:
                    error = document_ingest_text(
                        store=store, title=document.get("title") or source, content=text, source=source, tags=[]
                    ).refusal
                else:
                    incoming = IncomingFile(filename=f"{source}.txt", data=text.encode(), source=source)
                    error = document_upload(store=store, files=[incoming]).refusal
            except InvalidInput as invalid:
                error = invalid
            if error is None:
                continue
            if not isinstance(error, InvalidInput) and error.code != "duplicate_document":
                raise SystemExit(f"upload of {source} failed: {error.message}")
            skipped[source] = f"skipped at upload ({error.code}): {error.message}"
    return skipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--limit", type=int, help="only the first N documents")
    parser.add_argument("--smoke", action="store_true", help="tiny run to check the script works (20 documents)")
    args = parser.parse_args()
    limit = 20 if args.smoke else args.limit

    with BenchEnvironment(worker=True) as environment:
        from django.conf import settings
        from django.db.models import Count, Sum

        from gateway.connections.providers.embeddings import LocalEmbeddings
        from gateway.connections.providers.local_model import default_threads
        from ingestion.chunking import embedded_text
        from stores.models import Chunk, Document

        corpus, _, _ = load_beir(args.dataset, limit=limit)
        store = fresh_store("bench-ingest", local_connection())
        print(
            f"dataset {args.dataset} ({len(corpus)} documents); store defaults: chunk_size {store.chunk_size}, "
            f"overlap {store.chunk_overlap}, strategy {store.chunking_strategy}, contextual {store.contextual_chunks}; "
            f"INGEST_WORKERS {settings.INGEST_WORKERS}, threads per job {default_threads()}"
        )

        started = time.monotonic()
        skipped = upload_paced(store, corpus)
        documents = Document.objects.filter(store=store)
        settled = wait_for(lambda: not documents.filter(status__in=("pending", "processing")).exists(), timeout=7200)
        elapsed = time.monotonic() - started
        if not settled:
            raise SystemExit("ingestion did not settle within two hours")

        chunks = Chunk.objects.filter(store=store)
        chunk_count = chunks.count()
        unique_hashes = chunks.values("embedded_hash").distinct().count()
        failed = list(documents.filter(status="failed").values_list("filename", "error"))
        texts_by_hash = {}
        for chunk in chunks.select_related("document").only(
            "embedded_hash", "section", "content", "document__filename"
        ):
            texts_by_hash.setdefault(
                chunk.embedded_hash,
                embedded_text(
                    filename=chunk.document.filename,
                    section=chunk.section,
                    content=chunk.content,
                    contextual=store.contextual_chunks,
                ),
            )
        raw_seconds = raw_embedder_seconds(
            list(texts_by_hash.values()),
            workers=settings.INGEST_WORKERS,
            threads=default_threads(),
            batch=LocalEmbeddings.max_batch,
        )
        totals = documents.aggregate(count=Count("id"), size=Sum("size_bytes"))

        pipeline_rate = chunk_count / elapsed
        raw_rate = chunk_count / raw_seconds if raw_seconds else 0.0
        result = {
            "dataset": str(args.dataset),
            "documents": totals["count"],
            "bytes": totals["size"] or 0,
            "chunks": chunk_count,
            "seconds": round(elapsed, 2),
            "documents_per_s": round(len(corpus) / elapsed, 2),
            "chunks_per_s": round(pipeline_rate, 2),
            "raw_embedder_chunks_per_s": round(raw_rate, 2),
            "ratio": round(pipeline_rate / raw_rate, 3) if raw_rate else None,
            "embedding_cache_hits": chunk_count - unique_hashes,
            "failed_documents": len(failed),
            "skipped_documents": len(skipped),
            "failed": [f"{name}: {error}" for name, error in failed],
            "skipped": [f"{source}: {reason}" for source, reason in skipped.items()],
            "worker_peak_rss_mb": round(environment.peak_worker_rss / 2**20, 1),
        }
        print_table(
            [(name, value) for name, value in result.items() if name not in ("failed", "skipped", "dataset")],
            ("measure", "value"),
        )
        for line in result["failed"]:
            print(f"failed: {line}")
        for line in result["skipped"]:
            print(f"skipped: {line}")
        report(result)


if __name__ == "__main__":
    main()
