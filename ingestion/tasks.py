"""Celery carries only the wake-up: the documents table is the queue (see ingestion.queue)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import uuid

from celery import shared_task
from celery.signals import task_prerun, worker_process_init

from ingestion import queue
from ingestion.pipeline import run_job, stop_requested

logger = logging.getLogger("ragmux.ingestion")

# Enough claims per task to drain a burst, few enough that a long backlog is shared fairly.
MAX_JOBS_PER_TASK = 50


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@shared_task(name="ingestion.drain", ignore_result=True)
def drain_queue() -> None:
    if stop_requested.is_set():
        return
    owner = worker_identity()
    for _ in range(MAX_JOBS_PER_TASK):
        claims = queue.claim_documents(owner=owner)
        if not claims:
            return
        run_job(claims)
        if stop_requested.is_set():
            released = queue.release(claims)
            logger.info("worker stopping: %s unfinished document(s) put back in the queue", released)
            return
    wake_ingestion()


@shared_task(name="ingestion.requeue_expired", ignore_result=True)
def requeue_expired_leases() -> None:
    queue.requeue_expired()
    if queue.pending_exists():
        wake_ingestion()


def wake_ingestion() -> None:
    drain_queue.delay()


# Pool processes only: SIGTERM (what `ragmux` sends every worker process on Ctrl-C) ends the
# job in hand at its next step and gives its claims back, instead of Celery's default of ending
# the process mid-job, which leaves the claims held for a whole lease, counts them as attempts
# and logs a WorkerLostError. The task then returns, so the warm shutdown completes cleanly; a
# second SIGTERM (a cold shutdown) gets the default again. The handler is installed as a task
# starts because the pool resets signal handlers after its process initialisers run.
_pool_process = False
_default_sigterm = signal.SIG_DFL


@worker_process_init.connect
def _note_pool_process(**_) -> None:
    global _pool_process
    _pool_process = True


def _on_sigterm(signum, frame) -> None:
    signal.signal(signal.SIGTERM, _default_sigterm)
    stop_requested.set()


@task_prerun.connect
def _stop_gracefully_on_sigterm(**_) -> None:
    global _default_sigterm
    current = signal.getsignal(signal.SIGTERM)
    if _pool_process and current is not _on_sigterm:
        _default_sigterm = current
        signal.signal(signal.SIGTERM, _on_sigterm)
