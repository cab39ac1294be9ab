"""The kernel's periodic jobs, run by Celery beat (``CELERY_BEAT_SCHEDULE`` in the settings)."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from ragmux.core.audit import audit_purge

logger = logging.getLogger("ragmux.audit")


@shared_task(name="ragmux.purge_audit", ignore_result=True)
def purge_audit_entries() -> int:
    deleted = audit_purge(days=settings.AUDIT_RETENTION_DAYS)
    if deleted:
        logger.info("purged %s audit entries older than %s days", deleted, settings.AUDIT_RETENTION_DAYS)
    return deleted
