"""Celery carries only the wake-up: the documents table is the queue (see ingestion.queue)."""

from __future__ import annotations

import os
import socket
import uuid

from celery import shared_task

from ingestion import queue
from ingestion.pipeline import run_job

# Enough claims per task to drain a burst, few enough that a long backlog is shared fairly.
MAX_JOBS_PER_TASK = 50


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@shared_task(name="ingestion.drain", ignore_result=True)
def drain_queue() -> None:
    owner = worker_identity()
    for _ in range(MAX_JOBS_PER_TASK):
        claims = queue.claim_documents(owner=owner)
        if not claims:
            return
        run_job(claims)
    wake_ingestion()


@shared_task(name="ingestion.requeue_expired", ignore_result=True)
def requeue_expired_leases() -> None:
    queue.requeue_expired()
    if queue.pending_exists():
        wake_ingestion()


def wake_ingestion() -> None:
    drain_queue.delay()
