"""Bench scripts run end to end in their smoke mode, on the embedded default they start themselves."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]
# The suite's own services: a bench run without them must start (and stop) the embedded default.
SUITE_SERVICE_VARIABLES = ("DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY", "RAGMUX_ENCRYPTION_KEY", "RAGMUX_DATA_DIR")


@pytest.fixture
def run_tmpdir():
    """A TMPDIR of the run's own, so the bench's scratch folder lands inside it and the run's
    processes can be told apart from any other bench running on the machine. Not pytest's
    tmp_path: that is private to this user, and the embedded PostgreSQL runs as another one."""
    folder = Path(tempfile.mkdtemp(prefix="ragmux-bench-test-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def run_bench(script: str, tmpdir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {name: value for name, value in os.environ.items() if name not in SUITE_SERVICE_VARIABLES}
    env["TMPDIR"] = str(tmpdir)
    return subprocess.run(
        [sys.executable, f"bench/{script}", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


def is_ragmux_worker(cmdline: list[str]) -> bool:
    line = " ".join(cmdline)
    return "celery" in line and "-A ragmux worker" in line


def processes_left_by_run(tmpdir: Path, workers_before: set[tuple[int, float]]) -> list[str]:
    """Processes of the run still alive: anything naming its scratch folder on the command line
    (PostgreSQL, Redis), and Celery workers that were not running before and carry its TMPDIR."""
    left = []
    for process in psutil.process_iter(["pid", "cmdline", "create_time", "environ"]):
        cmdline = process.info["cmdline"] or []
        environ = process.info["environ"] or {}
        new_worker = (
            is_ragmux_worker(cmdline)
            and (process.info["pid"], process.info["create_time"]) not in workers_before
            and environ.get("TMPDIR") == str(tmpdir)
        )
        if new_worker or str(tmpdir) in " ".join(cmdline):
            left.append(f"{process.info['pid']}: {' '.join(cmdline)}")
    return left


def running_workers() -> set[tuple[int, float]]:
    return {
        (process.info["pid"], process.info["create_time"])
        for process in psutil.process_iter(["pid", "cmdline", "create_time"])
        if is_ragmux_worker(process.info["cmdline"] or [])
    }


QUALITY_CONFIGS = [
    "vector",
    "lexical pgvector (ts_rank_cd)",
    "lexical bm25",
    "hybrid pgvector",
    "hybrid bm25",
    "hybrid bm25 + typo tolerance",
    "hybrid bm25 weights 1:1.5",
    "hybrid bm25, plain-word queries (diagnostic)",
    "baseline bm25s",
    "baseline exact dense",
    "baseline rrf(bm25s, dense)",
]


@pytest.mark.slow
def test_quality_smoke_reports_every_configuration_and_leaves_nothing_running(run_tmpdir):
    workers_before = running_workers()

    finished = run_bench("quality.py", run_tmpdir, "--smoke")

    assert finished.returncode == 0, finished.stderr[-3000:]
    result = json.loads(finished.stdout.strip().splitlines()[-1])
    assert {"dataset", "settings", "results"} <= result.keys()
    assert result["settings"]["search_backend"] == "bm25"  # the store kept its default settings
    assert [row["config"] for row in result["results"]] == QUALITY_CONFIGS
    for row in result["results"]:
        assert 0.0 <= row["ndcg@10"] <= 1.0 and 0.0 <= row["recall@100"] <= 1.0
        assert row["documents_ranked"] > 0
    time.sleep(1)  # the worker's children may take a moment to go after their parent
    assert processes_left_by_run(run_tmpdir, workers_before) == []
    assert list(run_tmpdir.glob("ragmux-bench-*")) == []  # the scratch folder was removed


SEARCH_LATENCY_CONFIGS = [
    ("vector", None),
    ("lexical", "bm25"),
    ("lexical", "pgvector"),
    ("hybrid", "bm25"),
    ("hybrid", "pgvector"),
]


@pytest.mark.slow
def test_search_latency_smoke_reports_every_mode_and_backend_and_leaves_nothing_running(run_tmpdir):
    workers_before = running_workers()

    finished = run_bench("search_latency.py", run_tmpdir, "--smoke")

    assert finished.returncode == 0, finished.stderr[-3000:]
    result = json.loads(finished.stdout.strip().splitlines()[-1])
    assert {"chunks", "results", "hnsw_recall@10", "ef_search", "fill_seconds"} <= result.keys()
    assert result["chunks"] == 2000
    assert [(row["mode"], row["backend"]) for row in result["results"]] == SEARCH_LATENCY_CONFIGS
    for row in result["results"]:
        assert {"p50_ms", "p95_ms", "raw_p50_ms", "raw_p95_ms", "overhead_p50_ms"} <= row.keys()
        assert 0 < row["p50_ms"] <= row["p95_ms"]
    assert 0.0 <= result["hnsw_recall@10"] <= 1.0
    time.sleep(1)
    assert processes_left_by_run(run_tmpdir, workers_before) == []
    assert list(run_tmpdir.glob("ragmux-bench-*")) == []


@pytest.mark.slow
def test_ingest_smoke_reports_throughput_and_leaves_nothing_running(run_tmpdir):
    workers_before = running_workers()

    finished = run_bench("ingest.py", run_tmpdir, "--smoke")

    assert finished.returncode == 0, finished.stderr[-3000:]
    result = json.loads(finished.stdout.strip().splitlines()[-1])
    assert {
        "documents",
        "chunks",
        "seconds",
        "documents_per_s",
        "chunks_per_s",
        "raw_embedder_chunks_per_s",
        "ratio",
        "embedding_cache_hits",
        "failed_documents",
        "worker_peak_rss_mb",
    } <= result.keys()
    assert result["documents"] == 20
    assert result["chunks"] >= 20 and result["chunks_per_s"] > 0 and result["raw_embedder_chunks_per_s"] > 0
    assert result["worker_peak_rss_mb"] > 0
    time.sleep(1)
    assert processes_left_by_run(run_tmpdir, workers_before) == []
    assert list(run_tmpdir.glob("ragmux-bench-*")) == []
