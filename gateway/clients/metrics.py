"""Gauges of the client API, computed when `/metrics` is scraped: from the database, and the
route targets cooling down from the cooldown store."""

from __future__ import annotations

import logging

from django.db import DatabaseError
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from gateway.clients.limits import DAY, MICROS, MONTH, TOKENS
from gateway.clients.selectors import project_budgets_used, route_target_keys
from gateway.connections import cooldowns

logger = logging.getLogger("ragmux.core.metrics")

WINDOW_LABELS = {DAY: "daily", MONTH: "monthly"}
UNIT_LABELS = {TOKENS: "tokens", MICROS: "usd"}


class BudgetGaugesCollector:
    """``ragmux_budget_used_ratio`` for every budget a project has configured. Projects are few and
    made by admins, so a project's name is a bounded label; keys are not labels."""

    def describe(self):
        # Declaring nothing up front keeps registration from querying the database.
        return []

    def collect(self):
        try:
            uses = project_budgets_used(now=timezone.now())
        except DatabaseError as exc:
            logger.warning("budget gauges unavailable: %s", exc)
            return
        gauge = GaugeMetricFamily(
            "ragmux_budget_used_ratio",
            "Share of each configured project budget spent in its current window",
            labels=["project", "window", "unit"],
        )
        for use in uses:
            gauge.add_metric(
                [use.project, WINDOW_LABELS[use.kind.period], UNIT_LABELS[use.kind.column]], use.used / use.budget
            )
        yield gauge


class RouteCoolingCollector:
    """``ragmux_route_targets_cooling``: per route, its targets cooling down now, as Redis (or,
    while it is down, the scraped process) holds them. Routes are few and made by admins, so a
    route's name is a bounded label."""

    def describe(self):
        return []

    def collect(self):
        try:
            keys = route_target_keys()
        except DatabaseError as exc:
            logger.warning("route cooldown gauges unavailable: %s", exc)
            return
        cooling = cooldowns.cooling_now(sorted({key for _, key in keys}))
        gauge = GaugeMetricFamily(
            "ragmux_route_targets_cooling", "Targets of each route cooling down after failures", labels=["route"]
        )
        counts: dict[str, int] = {}
        for route, key in keys:
            counts[route] = counts.get(route, 0) + (key in cooling)
        for route, count in sorted(counts.items()):
            gauge.add_metric([route], count)
        yield gauge
