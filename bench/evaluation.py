"""Evaluation runs under load: a run of 225 questions over a synthetic store of 10,000 chunks,
started through the product's path while the dashboard's pages are requested.

    python bench/evaluation.py [--chunks N] [--questions Q] [--seed S] [--smoke]

The store is filled directly with bulk SQL as bench/search_latency.py fills it (Zipf-distributed
pseudo-words, clustered vectors, the ingestion path's term statistics; 10 chunks a document), with
the embedded default's `local` embedding connection. Each question is 3–8 words drawn from one
chunk and judges that chunk's document relevant; the set is made with the product's service.

Processes as in production: the web server and the evaluation worker node, started with the
commands ``ragmux serve`` uses (uvicorn; a Celery worker consuming only the ``evaluation`` queue,
one run at a time), and this script. The run is started with the API an admin's "compare" uses (``POST
…/eval-sets/{id}/runs``, store defaults), so it is queued on commit and executed by the worker:
each question embedded once by the store's model (the set's first run) and searched with a pool
of 100. Meanwhile one client requests the dashboard's pages (bench/dashboard.py's, signed in as
an admin with a session cookie) and the run's progress (the API the Evaluation tab polls) in turn,
over HTTP, until the run ends. Before the run the same pages are timed idle, for comparison.

Reported: each page's p50 / p95 idle and during the run (target: p95 under 500 ms during the
run), the run's duration (queued → done, and claimed → done from its row), questions per
second, and its summary. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time

import httpx
import numpy as np
from dashboard import pages as dashboard_pages
from harness import BenchEnvironment, answers, fresh_store, local_connection, print_table, report, started
from search_latency import (
    CHUNKS_PER_CLUSTER,
    CHUNKS_PER_DOCUMENT,
    MAX_CLUSTERS,
    VOCABULARY,
    WORDS_PER_CHUNK,
    WORDS_PER_QUERY,
    ZIPF_EXPONENT,
    clustered_vectors,
    fill_store,
    pseudo_words,
    synthetic_texts,
    zipf_cdf,
)

from retrieval.evaluation.scores import percentile

TARGET_P95_MS = 500
STORE_NAME = "bench-evaluation"
IDLE_ROUNDS = 5
SMOKE_CHUNKS = 300
SMOKE_QUESTIONS = 5
RUN_TIMEOUT = 3600


def questions_of(rng: np.random.Generator, texts: list[str], chunk_ids: np.ndarray, count: int) -> list[dict]:
    """``count`` questions, each some words of one chunk (distinct chunks), judging its document."""
    from stores.models import Chunk

    anchors = rng.choice(len(texts), size=count, replace=False)
    document_of = dict(Chunk.objects.filter(pk__in=chunk_ids[anchors].tolist()).values_list("pk", "document_id"))
    questions = []
    for anchor in anchors:
        words = list(dict.fromkeys(texts[anchor].split()))
        size = min(len(words), int(rng.integers(WORDS_PER_QUERY[0], WORDS_PER_QUERY[1] + 1)))
        picked = rng.choice(len(words), size=size, replace=False)
        questions.append(
            {
                "text": " ".join(words[n] for n in sorted(picked)),
                "judgements": [{"document_id": document_of[int(chunk_ids[anchor])], "grade": 1}],
            }
        )
    return questions


def worker_answers() -> bool:
    from ragmux.celery import app

    return bool(app.control.ping(timeout=0.5))


def time_pages(client: httpx.Client, urls: dict[str, str], timings: dict[str, list[float]]) -> None:
    """One request of each page, in turn, timed (the whole HTTP call)."""
    for name, url in urls.items():
        began = time.perf_counter()
        response = client.get(url)
        timings.setdefault(name, []).append((time.perf_counter() - began) * 1000)
        if response.status_code != 200:
            raise SystemExit(f"{name} ({url}) answered {response.status_code}: {response.text[:300]}")


def page_figures(timings: dict[str, list[float]]) -> dict[str, dict]:
    return {
        name: {
            "requests": len(samples),
            "p50_ms": round(percentile(samples, 50), 1),
            "p95_ms": round(percentile(samples, 95), 1),
        }
        for name, samples in timings.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, help=f"chunks in the store (default 10000; {SMOKE_CHUNKS} with --smoke)")
    parser.add_argument(
        "--questions", type=int, help=f"questions in the set (default 225; {SMOKE_QUESTIONS} with --smoke)"
    )
    parser.add_argument("--seed", type=int, default=20261203)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check the script runs")
    args = parser.parse_args()
    chunk_count = args.chunks or (SMOKE_CHUNKS if args.smoke else 10000)
    question_count = args.questions or (SMOKE_QUESTIONS if args.smoke else 225)
    rng = np.random.default_rng(args.seed)
    from ragmux.launch.embedded import free_port

    port = free_port()
    with BenchEnvironment(settings={"PORT": str(port), "LOG_LEVEL": "warning"}):
        from django.conf import settings
        from django.contrib.auth.models import User
        from django.test import Client

        from ragmux.core.authentication import issue_admin_token
        from ragmux.launch.processes import evaluation_worker_command, web_command
        from retrieval.evaluation.services import evaluation_set_create
        from retrieval.models import EvaluationRun

        began = time.monotonic()
        words = np.array(pseudo_words(VOCABULARY))
        texts = synthetic_texts(rng, words, zipf_cdf(VOCABULARY, ZIPF_EXPONENT), chunk_count, WORDS_PER_CHUNK)
        clusters = max(1, min(MAX_CLUSTERS, round(chunk_count / CHUNKS_PER_CLUSTER)))
        store = fresh_store(STORE_NAME, local_connection())
        chunk_ids, _ = fill_store(store, texts, clustered_vectors(rng, chunk_count, clusters))
        evaluation_set = evaluation_set_create(
            store=store, name="bench", questions=questions_of(rng, texts, chunk_ids, question_count)
        )
        fill_seconds = time.monotonic() - began
        print(
            f"store: {chunk_count} chunks in {-(-chunk_count // CHUNKS_PER_DOCUMENT)} documents, "
            f"set: {question_count} questions, made in {fill_seconds:.1f}s"
        )

        admin = User.objects.create_superuser("bench-evaluation-admin", password=None)
        signed_in = Client(HTTP_HOST="localhost")
        signed_in.force_login(admin)
        base = f"http://127.0.0.1:{port}"
        session = {settings.SESSION_COOKIE_NAME: signed_in.cookies[settings.SESSION_COOKIE_NAME].value}
        api = f"/admin/api/rag-stores/{store.pk}/eval-sets/{evaluation_set.pk}"
        evaluation_pages = f"/admin/stores/{store.pk}/evaluation/"
        urls = {
            **dashboard_pages(store),
            "evaluation tab": evaluation_pages,
            "evaluation set": f"{evaluation_pages}{evaluation_set.pk}/",
            "evaluation runs (poll)": f"{evaluation_pages}{evaluation_set.pk}/runs",
            "question by question": f"{evaluation_pages}{evaluation_set.pk}/answers",
        }
        with (
            started(
                web_command(),
                lambda: answers(f"{base}/healthz"),
                "the web server",
                env=dict(os.environ),
                stderr=subprocess.DEVNULL,
            ),
            started(
                evaluation_worker_command(),
                worker_answers,
                "the evaluation worker",
                env=dict(os.environ),
                start_new_session=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            ),
            httpx.Client(base_url=base, cookies=session, timeout=60) as client,
            httpx.Client(
                base_url=base, headers={"Authorization": f"Bearer {issue_admin_token(user=admin)}"}, timeout=60
            ) as admin_api,
        ):
            idle: dict[str, list[float]] = {}
            time_pages(client, urls, {})  # warm: templates compiled, caches filled
            for _ in range(IDLE_ROUNDS):
                time_pages(client, urls, idle)

            load_before = os.getloadavg()
            queued_at = time.monotonic()
            response = admin_api.post(f"{api}/runs", json={"configs": [{"label": "store defaults", "overrides": {}}]})
            if response.status_code != 202:
                raise SystemExit(f"starting the run answered {response.status_code}: {response.text[:300]}")
            run_id = response.json()["runs"][0]["id"]
            urls_during = {**urls, "run progress (API)": f"{api}/runs/{run_id}"}
            during: dict[str, list[float]] = {}
            rounds = 0
            while rounds == 0 or EvaluationRun.objects.filter(pk=run_id, status__in=("queued", "running")).exists():
                time_pages(client, urls_during, during)
                rounds += 1
                if time.monotonic() - queued_at > RUN_TIMEOUT:
                    raise SystemExit(f"the run did not end within {RUN_TIMEOUT}s")
            # The loop's last check saw the run end; a round may have started just before.
            wall_seconds = time.monotonic() - queued_at
            load_after = os.getloadavg()

        run = EvaluationRun.objects.get(pk=run_id)
        if run.status != "done":
            raise SystemExit(f"the run ended {run.status}: {run.error}")
        run_seconds = (run.finished_at - run.started_at).total_seconds()
        idle_figures, during_figures = page_figures(idle), page_figures(during)
        print(
            f"run {run_id}: {run.questions_done} questions, queued → done {wall_seconds:.1f}s, claimed → done "
            f"{run_seconds:.1f}s ({run.questions_done / run_seconds:.1f} questions/s); "
            f"nDCG@10 {run.summary['ndcg']:.3f}, mean search {run.summary['latency_mean_ms']:.1f} ms, "
            f"p95 {run.summary['latency_p95_ms']:.1f} ms"
        )
        print(
            f"pages: {IDLE_ROUNDS} rounds idle, {rounds} rounds during the run; load average "
            f"{load_before[0]:.2f} before the run, {load_after[0]:.2f} at its end"
        )
        print_table(
            [
                (
                    name,
                    f"{idle_figures[name]['p50_ms']:.1f}" if name in idle_figures else "—",
                    f"{idle_figures[name]['p95_ms']:.1f}" if name in idle_figures else "—",
                    f"{figures['p50_ms']:.1f}",
                    f"{figures['p95_ms']:.1f}",
                )
                for name, figures in during_figures.items()
            ],
            ("page", "idle p50 ms", "idle p95 ms", "during run p50 ms", "during run p95 ms"),
        )
        worst = max(figures["p95_ms"] for figures in during_figures.values())
        every_request = [sample for samples in during.values() for sample in samples]
        report(
            {
                "bench": "evaluation",
                "chunks": chunk_count,
                "questions": question_count,
                "fill_seconds": round(fill_seconds, 1),
                "run": {
                    "id": run_id,
                    "status": run.status,
                    "questions_done": run.questions_done,
                    "queued_to_done_seconds": round(wall_seconds, 2),
                    "claimed_to_done_seconds": round(run_seconds, 2),
                    "questions_per_second": round(run.questions_done / run_seconds, 2),
                    "summary": run.summary,
                },
                "rounds_during_run": rounds,
                "pages_idle": idle_figures,
                "pages_during_run": during_figures,
                "all_pages_during_run": {
                    "requests": len(every_request),
                    "p50_ms": round(percentile(every_request, 50), 1),
                    "p95_ms": round(percentile(every_request, 95), 1),
                },
                "worst_p95_ms": worst,
                "target_p95_ms": TARGET_P95_MS,
                "within_target": worst < TARGET_P95_MS,
                "load_average": {"before_run": round(load_before[0], 2), "end_of_run": round(load_after[0], 2)},
            }
        )


if __name__ == "__main__":
    main()
