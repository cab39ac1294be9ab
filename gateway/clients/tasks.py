"""Periodic jobs of the client API, run by Celery beat (`CELERY_BEAT_SCHEDULE`)."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from gateway.clients.services import request_log_purge, stored_response_purge
from gateway.clients.usage import usage_counter_purge

logger = logging.getLogger("ragmux.gateway.retention")


@shared_task(name="gateway.purge_request_logs", ignore_result=True)
def purge_request_logs() -> None:
    deleted = request_log_purge(retention_days=settings.LOG_RETENTION_DAYS)
    if deleted:
        logger.info("request logs older than %s days purged: %s rows", settings.LOG_RETENTION_DAYS, deleted)
    responses = stored_response_purge(retention_days=settings.LOG_RETENTION_DAYS)
    if responses:
        logger.info("stored responses older than %s days purged: %s", settings.LOG_RETENTION_DAYS, responses)


@shared_task(name="gateway.purge_usage_counters", ignore_result=True)
def purge_usage_counters() -> None:
    deleted = usage_counter_purge(now=timezone.now())
    if deleted:
        logger.info("usage counters past their retention purged: %s rows", deleted)
