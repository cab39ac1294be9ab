"""The dashboard's template filters (built in: every template has them): each shows one kind of
value the same way on every page."""

from __future__ import annotations

from django import template

from ingestion.queue import stage_of

register = template.Library()


@register.filter
def ingestion_stage(progress_percent: int) -> str:
    """A processing document's stage: "embedding 40 %"."""
    return stage_of(progress_percent)
