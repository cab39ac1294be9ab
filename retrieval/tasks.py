"""Evaluation runs in the background, on the `evaluation` queue (settings.CELERY_TASK_ROUTES), served
by a worker node of its own so that a run never holds up ingestion."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from ragmux.core.work_queue import stop_requested, worker_identity
from retrieval.evaluation import run_services


def _hard_time_limit() -> int:
    # A run stops itself at EVALUATION_RUN_TIME_LIMIT between two questions (and fails with the
    # reason); this backstop ends a process stuck in one question, whose run the sweep then takes back.
    return int(settings.EVALUATION_RUN_TIME_LIMIT + settings.EVALUATION_RUN_LEASE)


@shared_task(name="retrieval.evaluation_run", ignore_result=True, time_limit=_hard_time_limit())
def evaluation_run(run_id: int) -> None:
    run = run_services.evaluation_run_claim(run_id=run_id, owner=worker_identity())
    if run is not None:
        # A worker asked to stop (SIGTERM: ragmux.core.work_queue) gives the run back between two questions.
        run_services.evaluation_run_execute(run=run, stop_requested=stop_requested.is_set)


@shared_task(name="retrieval.evaluation_requeue_expired", ignore_result=True)
def evaluation_requeue_expired() -> None:
    for run_id in run_services.evaluation_runs_requeue_expired():
        evaluation_run.delay(run_id)
