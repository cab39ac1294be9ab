"""A `/v1` call's admission under its project's and its key's rate limits and budgets.

Called by each `/v1` view once it knows the call's estimated size and before anything is spent
(the upstream call, the query's embedding). The policy is `gateway.clients.limits`, the counters
`gateway.clients.usage`; the call settles when its request log row is written
(`gateway.clients.ledger`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import psycopg
from django.utils import timezone

from gateway.clients import limits, selectors, usage
from gateway.clients.ledger import Call, Spend, price
from gateway.connections.pricing import UNPRICED
from ragmux.core import metrics
from ragmux.core.errors import Forbidden, RateLimited, Unavailable

logger = logging.getLogger("ragmux.gateway.limits")


async def _estimated_micros(spends: list[Spend], dearest_of: list[Spend]) -> int:
    """The call's price if it spends what it is estimated to, from the price table the ledger
    prices its row with: every one of ``spends``, and the dearest of ``dearest_of`` (the
    targets of a route, any of which may answer). A model without a price is refused rather than
    counted as free."""
    everything = [*spends, *dearest_of]
    rows = await selectors.prices_of(provider_types=sorted({spend.provider_type for spend in everything}))
    micros = {}
    for spend in everything:
        micros[spend], source = price([spend], rows)
        if source == UNPRICED:
            raise Forbidden(
                f"model {spend.model!r} has no price, and this call is under a dollar budget; "
                "an admin must price it first",
                code="unpriced_model",
            )
    return sum(micros[spend] for spend in spends) + max((micros[spend] for spend in dearest_of), default=0)


async def admit(call: Call, *, tokens: int, spends: list[Spend], dearest_of: Sequence[Spend] = ()) -> None:
    """Admits the call, reserving ``tokens`` and the price of ``spends`` (and of the dearest of
    ``dearest_of``) until it settles, or refuses it (429, or 403 for an unpriced model under a
    dollar budget). Either way the call carries the headers of its configured limits."""
    now = timezone.now()
    project, key = call.project, call.key
    admission = usage.Admission(project_id=project.pk, key_id=key.pk, windows=usage.admission_windows(now))
    checks = limits.plan(project=project, key=key, estimate_tokens=tokens)
    if not checks:
        call.admission = admission  # nothing to check: the call counts when it settles
        return
    micros = await _estimated_micros(spends, list(dearest_of)) if limits.has_dollar_budget(project, key) else 0
    try:
        denied = await usage.reserve(admission, checks=checks, tokens=tokens, micros=micros)
    except psycopg.Error:
        if any(check.kind in limits.BUDGETS for check in checks):
            logger.exception("limit check failed for project %s", project.pk)
            raise Unavailable("limit check failed; retry shortly", code="limit_check_failed") from None
        call.admission = admission
        # Minute limits only: better a call past them than an outage.
        logger.exception("minute limits of project %s not checked: the counters cannot be reached", project.pk)
        metrics.increment(metrics.LIMITS_UNCHECKED)
        return
    if denied is None:
        call.admission = admission  # a refused call reserved nothing and is not counted
    counters = admission.counters
    call.limit_headers = limits.limit_headers(checks, counters, now, denied)
    if denied is not None:
        refusal = limits.denial(denied, counters[denied.tier, denied.kind.period][denied.kind.column], now)
        error = RateLimited(refusal.message, code=refusal.code, openai_type=refusal.error_type)
        error.scope, error.retry_after = refusal.scope, refusal.retry_after
        metrics.increment(metrics.LIMITS_DENIED, code=refusal.code, scope=refusal.scope)
        raise error
