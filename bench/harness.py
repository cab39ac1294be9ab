"""What every bench script shares: the services it runs on, a worker when it needs one, and
its report (a table, then one JSON object as the last line).

With DATABASE_URL unset a script runs on the embedded default in a scratch data folder that
is deleted afterwards, and stops everything it started. With DATABASE_URL / REDIS_URL set it
uses those services (and still starts, and stops, its own worker).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parent.parent
# Cranfield lives in the team's shared folder beside the checkout (/work/shared next to
# /work/main), or further up for a worktree (/work/wt/NAME): the first one found going up.
DEFAULT_DATASET = next(
    (folder / "shared" / "data" / "cranfield" for folder in REPO.parents if (folder / "shared" / "data").is_dir()),
    REPO.parent / "shared" / "data" / "cranfield",
)
sys.path.insert(0, str(REPO))


class BenchEnvironment:
    """The embedded PostgreSQL and Redis in a scratch data folder, removed at the end; or in
    ``data_dir``, kept (created when missing, reused as it is when a bench kept it before)."""

    def __init__(self, *, worker: bool = False, settings: dict[str, str] | None = None, data_dir: Path | None = None):
        self.want_worker = worker
        self.settings = settings or {}
        self.data_dir = data_dir
        self.scratch: Path | None = None
        self.services = None
        self.worker: subprocess.Popen | None = None
        self.peak_worker_rss = 0
        self._sampling = threading.Event()

    def __enter__(self) -> BenchEnvironment:
        from ragmux.launch.embedded import EmbeddedServices

        os.environ.update(self.settings)
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ragmux.settings")
        if not os.environ.get("DATABASE_URL"):
            if self.data_dir is None:
                self.scratch = Path(tempfile.mkdtemp(prefix="ragmux-bench-"))
            else:
                self.data_dir.mkdir(parents=True, exist_ok=True)
            folder = self.data_dir or self.scratch
            folder.chmod(0o755)
            os.environ["RAGMUX_DATA_DIR"] = str(folder)
            os.environ["PRIVATE_UPSTREAM_ALLOWLIST"] = os.environ.get("PRIVATE_UPSTREAM_ALLOWLIST", "127.0.0.1")
            self.services = EmbeddedServices.plan(os.environ, folder)
            self.services.start(os.environ)
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", interactive=False, verbosity=0)
        if self.want_worker:
            self._start_worker()
        return self

    def _start_worker(self) -> None:
        from django.conf import settings

        self.worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "ragmux",
                "worker",
                "--loglevel",
                "warning",
                "--concurrency",
                str(settings.INGEST_WORKERS),
                "--without-mingle",
                "--without-gossip",
            ],
            cwd=REPO,
            env=dict(os.environ),
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        threading.Thread(target=self._sample_worker_memory, daemon=True).start()

    def _sample_worker_memory(self) -> None:
        while not self._sampling.wait(0.2):
            try:
                root = psutil.Process(self.worker.pid)
                tree = [root, *root.children(recursive=True)]
                self.peak_worker_rss = max(self.peak_worker_rss, sum(p.memory_info().rss for p in tree))
            except psutil.Error:
                continue

    def __exit__(self, *exc_info) -> None:
        self._sampling.set()
        if self.worker is not None and self.worker.poll() is None:
            os.killpg(self.worker.pid, signal.SIGTERM)
            try:
                self.worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.worker.pid, signal.SIGKILL)
                self.worker.wait()
        from django.db import connections

        connections.close_all()
        if self.services is not None:
            self.services.stop()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)


def local_connection():
    """The embedded default's `local` embedding connection (created if missing)."""
    from gateway.connections.models import ModelConnection
    from gateway.connections.providers import local_model
    from gateway.connections.services import connection_create

    existing = ModelConnection.objects.filter(provider_type="local").first()
    return existing or connection_create(
        name="local", provider_type="local", base_url="", model_name=local_model.MODEL_NAME, dimensions=None, api_key=""
    )


def fresh_store(name: str, connection, **values):
    from stores.models import RagStore
    from stores.services import store_create, store_delete

    for old in RagStore.objects.filter(name=name):
        store_delete(store=old)
    return store_create(name=name, values={"embedding_connection_id": connection.id, **values})


def load_beir(dataset: Path, *, limit: int | None = None):
    """(corpus, query id → text, qrels) of a BEIR-layout folder, read by the product's reader
    (retrieval.evaluation.beir); the corpus in file order, its first ``limit`` documents."""
    from retrieval.evaluation.beir import read_collection

    corpus, queries, qrels = read_collection(dataset)
    return corpus[:limit] if limit else corpus, queries, qrels


def document_text(document: dict) -> str:
    return "\n\n".join(part for part in (document.get("title", ""), document.get("text", "")) if part.strip())


@contextmanager
def started(command: list[str], ready, what: str, **kwargs) -> Iterator[subprocess.Popen]:
    """A process of the bench (a server, a fake upstream), once ``ready()``; stopped afterwards."""
    process = subprocess.Popen(command, cwd=REPO, **kwargs)
    try:
        if not wait_for(lambda: process.poll() is None and ready(), timeout=60, poll=0.1):
            raise SystemExit(f"{what} did not start")
        yield process
    finally:
        process.terminate()
        process.wait(timeout=30)


def answers(url: str) -> bool:
    """Whether anything answers HTTP at ``url``."""
    try:
        httpx.get(url, timeout=1)
    except httpx.TransportError:
        return False
    return True


def print_table(rows: list[tuple], headers: tuple[str, ...]) -> None:
    widths = [max(len(str(x)) for x in column) for column in zip(headers, *rows, strict=True)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    print(line.format(*headers))
    print(line.format(*("-" * w for w in widths)))
    for row in rows:
        print(line.format(*row))


def report(result: dict) -> None:
    print(json.dumps(result), flush=True)


def wait_for(condition, *, timeout: float, poll: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(poll)
    return False


def rebuild_lexical_index(store, config: str) -> float:
    """Switches the store's index_config and runs the lexical rebuild in this process; returns
    its seconds. The row is updated directly: the settings service would hand the rebuild to a
    worker, out of the clock's sight."""
    from stores.models import RagStore
    from stores.rebuild import lexical_index_rebuild

    RagStore.objects.filter(pk=store.pk).update(index_config=config)
    started = time.monotonic()
    outcome = lexical_index_rebuild(store_id=store.pk)
    seconds = time.monotonic() - started
    if outcome != "rebuilt":
        raise SystemExit(f"the lexical rebuild to {config} ended {outcome!r}")
    store.refresh_from_db()
    return seconds


def load_embedding_cache(path: Path) -> dict:
    """Text → vector, as :func:`save_embedding_cache` wrote it (empty when there is no file yet)."""
    import numpy as np

    if not path.is_file():
        return {}
    stored = np.load(path)
    return dict(zip(stored["texts"].tolist(), stored["vectors"], strict=True))


def save_embedding_cache(cache: dict, path: Path) -> None:
    """Writes text → vector to ``path`` (an .npz) whole, through a file renamed into place, so an
    interrupted write leaves the previous cache."""
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    texts = list(cache)
    vectors = np.asarray([cache[text] for text in texts], dtype=np.float32)
    np.savez_compressed(path.with_suffix(".tmp.npz"), texts=np.array(texts), vectors=vectors)
    path.with_suffix(".tmp.npz").replace(path)
