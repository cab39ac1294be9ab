"""The processes the `ragmux` command starts: the web server, the two worker nodes and the
scheduler, as command lines, and where their metrics are shared and served."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from ragmux.core.paths import DEFAULT_DATA_DIR


def data_dir() -> Path:
    return Path(os.environ.get("RAGMUX_DATA_DIR") or DEFAULT_DATA_DIR).resolve()


def share_metrics(name: str) -> Path:
    """Puts the processes this command starts in prometheus_client's multiprocess mode, in a
    folder of their own under the data folder, emptied first: counters start again with the
    processes, as Prometheus expects of a restart. This process itself stays out of it."""
    from ragmux.core.metrics import MULTIPROCESS_DIR

    folder = data_dir() / "metrics" / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    os.environ[MULTIPROCESS_DIR] = str(folder)
    return folder


def _celery(*args: str) -> list[str]:
    from django.conf import settings

    # With JSON logs, no start-up banner: it is many lines of text among the JSON ones.
    quiet = ["--quiet"] if settings.LOG_FORMAT == "json" else []
    return [sys.executable, "-m", "celery", "-A", "ragmux", *quiet, *args]


# A worker's Celery name is this, its host's name and the launching process's id.
WORKER_NAME_PREFIX = "ragmux@"


# The evaluation worker node's name starts with this instead (ragmux.settings.EVALUATION_QUEUE).
EVALUATION_WORKER_NAME_PREFIX = "ragmux-evaluation@"


def worker_command() -> list[str]:
    """The ingestion worker node: the default queue (ingestion and the scheduler's jobs)."""
    from django.conf import settings

    return _celery(
        "worker",
        "--loglevel",
        settings.LOG_LEVEL,
        "--queues",
        settings.CELERY_TASK_DEFAULT_QUEUE,
        "--concurrency",
        str(settings.INGEST_WORKERS),
        "--hostname",
        f"{WORKER_NAME_PREFIX}{os.uname().nodename}-{os.getpid()}",
    )


def evaluation_worker_command() -> list[str]:
    """The evaluation worker node beside it: one run at a time, on a queue of its own, so that
    a run never holds up ingestion."""
    from django.conf import settings

    return _celery(
        "worker",
        "--loglevel",
        settings.LOG_LEVEL,
        "--queues",
        settings.EVALUATION_QUEUE,
        "--concurrency",
        "1",
        "--hostname",
        f"{EVALUATION_WORKER_NAME_PREFIX}{os.uname().nodename}-{os.getpid()}",
    )


def worker_commands() -> dict[str, list[str]]:
    """What `ragmux worker` (and `ragmux serve`) start: both worker nodes."""
    return {"worker": worker_command(), "evaluation worker": evaluation_worker_command()}


def scheduler_command() -> list[str]:
    from django.conf import settings

    schedule = Path(settings.RAGMUX_DATA_DIR) / "celerybeat-schedule"
    schedule.parent.mkdir(parents=True, exist_ok=True)
    return _celery("beat", "--loglevel", settings.LOG_LEVEL, "--schedule", str(schedule))


def web_command() -> list[str]:
    from django.conf import settings

    return [
        sys.executable,
        "-m",
        "uvicorn",
        "ragmux.asgi:application",
        "--host",
        settings.HOST,
        "--port",
        str(settings.PORT),
        "--workers",
        str(settings.WEB_WORKERS),
        "--no-access-log",
        "--lifespan",
        "on",
        "--timeout-graceful-shutdown",
        "15",
    ]


def listen_for_metrics(address: tuple[str, int], collector) -> bool:
    from django.conf import settings

    from ragmux.launch import metrics_listener

    try:
        metrics_listener.start(address, collector, settings.METRICS_TOKEN)
    except OSError as exc:
        sys.stderr.write(f"ragmux: cannot serve metrics on {address[0]}:{address[1]}: {exc}\n")
        return False
    return True


class WorkerMetrics:
    """A worker's metrics: those of its pool processes, summed, and the build's."""

    def __init__(self, folder: Path):
        from ragmux.core.metrics import BuildInfoCollector, multiprocess_registry

        self._parts = (multiprocess_registry(str(folder)), BuildInfoCollector())

    def collect(self):
        for part in self._parts:
            yield from part.collect()


def worker_metrics_address(metrics_port: int | None) -> tuple[str, int] | None:
    """Where a worker serves its metrics: ``--metrics-port`` on METRICS_LISTEN's host (else
    HOST), or METRICS_LISTEN itself; None when neither is given or the metrics are off."""
    from django.conf import settings

    if not settings.METRICS_ENABLED:
        return None
    if metrics_port is None:
        return settings.METRICS_LISTEN
    host = settings.METRICS_LISTEN[0] if settings.METRICS_LISTEN is not None else settings.HOST
    return host, metrics_port
