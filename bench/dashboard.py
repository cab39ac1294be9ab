"""Dashboard render time: each page rendered by the server, with many stores and a large store.

    python bench/dashboard.py [--stores N] [--documents D] [--renders R] [--smoke]

Rows are written directly (bulk inserts, no ingestion): ``--stores`` stores (50), one of them
holding ``--documents`` documents (1000) in every status, failed ones with an error stage and
reason, the others one document each. Each page is requested ``--renders`` times (30) through
Django's test client signed in as an admin, so the time is the whole server side (middleware,
session, role, selectors, template) without a network. Reported per page: p50 and p95 in ms and
the SQL queries it ran. Target: p95 at most 300 ms. Search compare runs two lexical searches of a
store without chunks: its page overhead (search itself is bench/search_latency.py). Last line:
one JSON object.
"""

from __future__ import annotations

import argparse
import hashlib
import time

from harness import BenchEnvironment, print_table, report

from retrieval.evaluation.scores import percentile

STATUSES = ("ready", "ready", "ready", "pending", "processing", "failed")
TARGET_MS = 300


def fill(stores: int, documents: int):
    from django.contrib.auth.models import User

    from gateway.connections.models import ModelConnection
    from stores.models import Document, RagStore

    connection = ModelConnection.objects.create(
        name="bench-dashboard", provider_type="openai", base_url="", model_name="text-embedding-3-small"
    )
    created = RagStore.objects.bulk_create(
        RagStore(name=f"bench-dashboard-{n:03}", embedding_connection=connection) for n in range(stores)
    )
    big, others = created[0], created[1:]

    def document(store, n: int, status: str) -> Document:
        original = f"document {n} of {store.name}".encode()
        failed = status == "failed"
        return Document(
            store=store,
            filename=f"report-{n:04}.pdf",
            mime="application/pdf",
            original=original,
            size_bytes=len(original) * 1000,
            content_sha256=hashlib.sha256(original).hexdigest(),
            status=status,
            progress_percent={"ready": 100, "processing": 40}.get(status, 20 if failed else 0),
            error="the PDF has no text layer (scanned pages need OCR)" if failed else "",
            error_stage="parse" if failed else "",
            page_count=12 if status == "ready" else None,
            chunk_count=30 if status == "ready" else 0,
        )

    Document.objects.bulk_create(
        [document(big, n, STATUSES[n % len(STATUSES)]) for n in range(documents)]
        + [document(store, 0, "ready") for store in others],
        batch_size=1000,
    )
    admin = User.objects.create_superuser("bench-dashboard-admin", password=None)
    return big, admin


def pages(store) -> dict[str, str]:
    return {
        "overview": "/admin/",
        "stores": "/admin/stores/",
        "store page": f"/admin/stores/{store.pk}/",
        "store page, failed filter": f"/admin/stores/{store.pk}/?status=failed",
        "document table (poll)": f"/admin/stores/{store.pk}/documents",
        "store settings": f"/admin/stores/{store.pk}/settings",
        "delete confirmation": f"/admin/stores/{store.pk}/delete",
        "search compare": f"/admin/search/?store={store.pk}&q=annual+report&a-mode=lexical&a-backend=pgvector"
        "&b-mode=lexical&b-backend=bm25",
    }


def measure(client, url: str, renders: int) -> tuple[list[float], int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.get(url)  # warm: templates compiled, caches filled
    timings = []
    for _ in range(renders):
        started = time.perf_counter()
        response = client.get(url)
        timings.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (url, response.status_code)
    with CaptureQueriesContext(connection) as captured:
        client.get(url)
    return timings, len(captured)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", type=int, default=50)
    parser.add_argument("--documents", type=int, default=1000)
    parser.add_argument("--renders", type=int, default=30)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check the script runs")
    args = parser.parse_args()
    if args.smoke:
        args.stores, args.documents, args.renders = 3, 20, 2

    with BenchEnvironment():
        from django.test import Client

        store, admin = fill(args.stores, args.documents)
        client = Client(HTTP_HOST="localhost")
        client.force_login(admin)
        rows, results = [], {}
        for name, url in pages(store).items():
            timings, queries = measure(client, url, args.renders)
            p50, p95 = percentile(timings, 50), percentile(timings, 95)
            rows.append((name, f"{p50:.1f}", f"{p95:.1f}", queries))
            results[name] = {"p50_ms": round(p50, 1), "p95_ms": round(p95, 1), "queries": queries}
        print(f"{args.stores} stores, {args.documents} documents in the largest, {args.renders} renders per page")
        print_table(rows, ("page", "p50 ms", "p95 ms", "queries"))
        worst = max(result["p95_ms"] for result in results.values())
        report(
            {
                "bench": "dashboard",
                "stores": args.stores,
                "documents": args.documents,
                "renders": args.renders,
                "pages": results,
                "worst_p95_ms": worst,
                "target_ms": TARGET_MS,
                "within_target": worst <= TARGET_MS,
            }
        )


if __name__ == "__main__":
    main()
