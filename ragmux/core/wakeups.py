"""Celery messages sent once a user's write has committed.

Redis carries only wake-ups: the rows are the truth, and a scheduler sweep finds the work a lost
message left behind (`ingestion.requeue_expired` for queued documents, every
INGEST_REQUEUE_INTERVAL; `stores.sweep_lexical_indexes` for lexical rebuilds). So a message that
cannot reach Redis is logged, not raised: the write has committed and must be answered as such,
and a client retrying it would only make a duplicate. How long a send may take while Redis is
down is bounded by the broker's timeouts and publish retries in the settings, and while the
process sees Redis as down (`ragmux.core.redis.redis_outage`) it does not try at all.
"""

from __future__ import annotations

import logging
from functools import partial

from celery import Task
from django.db import transaction
from kombu.exceptions import OperationalError

from ragmux.core.redis import redis_outage

logger = logging.getLogger("ragmux.wakeups")


def send_on_commit(task: Task, *args) -> None:
    """Queues ``task`` with ``args`` when the current transaction commits, at best effort."""
    transaction.on_commit(partial(_send, task, args))


def _send(task: Task, args: tuple) -> None:
    # One line per message lost, without a traceback: the cause is the broker, not our code.
    if redis_outage.skip():
        logger.warning("%s not sent, Redis is down; the scheduler's sweep will find the work", task.name)
        return
    try:
        task.delay(*args)
    except OperationalError as exc:
        redis_outage.failed(exc)
        logger.warning("%s not sent (%s); the scheduler's sweep will find the work", task.name, exc)
    else:
        redis_outage.succeeded()
