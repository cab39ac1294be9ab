"""Celery carries only the wake-up: the documents table is the queue (see ingestion.queue)."""

from __future__ import annotations

import logging

from celery import shared_task

from ingestion import queue
from ingestion.pipeline import run_job
from ragmux.core.work_queue import stop_requested, worker_identity

logger = logging.getLogger("ragmux.ingestion")

# Enough claims per task to drain a burst, few enough that a long backlog is shared fairly.
MAX_JOBS_PER_TASK = 50


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
