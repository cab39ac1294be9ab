"""A `/v1` call's admission under its project's and its key's rate limits and budgets.

Called by each `/v1` view once it knows the call's estimated size and before anything is spent
(the upstream call, the query's embedding). The policy is `gateway.clients.limits`, the counters
`gateway.clients.usage`; the call settles when its request log row is written
(`gateway.clients.ledger`).

The calls of one project that wait for admission in one process are admitted together: a
process has at most one admission statement per project in flight, and the calls that come
while it runs go in the next one, with one price read for all of them. Alone, a call is a batch
of one and waits for nothing; under load, the project's lock changes hands once per batch and
each call costs a share of two round trips instead of two of its own. The verdicts are the
ones the calls would have had one by one in the order they came (`usage.admit`).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import psycopg
from django.utils import timezone

from gateway.clients import limits, selectors, usage
from gateway.clients.ledger import Call, Spend, price, settlement
from gateway.connections.pricing import UNPRICED
from ragmux.core import metrics
from ragmux.core.errors import Forbidden, RateLimited, Unavailable

logger = logging.getLogger("ragmux.gateway.limits")

# The most calls in one admission statement; more wait for the next.
MAX_BATCH = 100
# How long a release statement may take before its calls are left to be settled with their rows:
# an answer is never held longer than this by a slow or frozen database.
RELEASE_SECONDS = 2.0


@dataclass(eq=False)
class _Waiting:
    """A call waiting for its verdict, and the verdict once its batch has run."""

    call: Call
    checks: list[limits.Check]
    tokens: int
    spends: list[Spend]
    # The targets of a route, any of which may answer: the dearest is reserved.
    dearest_of: Sequence[Spend]
    decided: asyncio.Future
    claim: usage.Claim | None = None
    denied: limits.Check | None = None
    now: datetime | None = None
    # The model without a price that a dollar budget refuses the call for.
    unpriced_model: str | None = None
    # Why the counters could not be checked, when they could not.
    failure: BaseException | None = None


@dataclass(eq=False)
class _ProjectQueue:
    waiting: list[_Waiting] = field(default_factory=list)
    runner: asyncio.Task | None = None


# Per event loop (the futures belong to it), per project (projects are few: made by admins).
_queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, _ProjectQueue]] = weakref.WeakKeyDictionary()


async def _price_batch(batch: list[_Waiting]) -> None:
    """Each call's estimated price, for the calls under a dollar budget: from one read of the
    price table the ledger prices rows with; a model without a price refuses its call rather
    than count it as free."""
    priced = [waiting for waiting in batch if limits.has_dollar_budget(waiting.call.project, waiting.call.key)]
    if not priced:
        return
    try:
        rows = await selectors.prices_of(
            provider_types=sorted(
                {spend.provider_type for waiting in priced for spend in (*waiting.spends, *waiting.dearest_of)}
            )
        )
    except psycopg.Error as exc:
        for waiting in priced:
            waiting.failure = exc
        return
    for waiting in priced:
        micros = {}
        for spend in (*waiting.spends, *waiting.dearest_of):
            micros[spend], source = price([spend], rows)
            # A top-up's rerank sits beside a chat: without a price it adds 0, as on the call's row.
            if source == UNPRICED and not (spend.rerank and waiting.claim.requests == 0):
                waiting.unpriced_model = spend.model
                break
        else:
            waiting.claim.micros = sum(micros[spend] for spend in waiting.spends) + max(
                (micros[spend] for spend in waiting.dearest_of), default=0
            )


async def _admit_batch(project_id: int, batch: list[_Waiting]) -> None:
    now = timezone.now()
    windows = usage.admission_windows(now)
    for waiting in batch:
        waiting.now = now
        admission = usage.Admission(project_id=project_id, key_id=waiting.call.key.pk, windows=windows)
        waiting.claim = usage.Claim(admission=admission, checks=waiting.checks, tokens=waiting.tokens, micros=0)
    await _check_batch(batch)


async def _check_batch(batch: list[_Waiting]) -> None:
    """Prices the batch's claims and runs them in one admission statement."""
    await _price_batch(batch)
    checked = [waiting for waiting in batch if waiting.failure is None and waiting.unpriced_model is None]
    if not checked:
        return
    try:
        verdicts = await usage.admit([waiting.claim for waiting in checked])
    except psycopg.Error as exc:
        for waiting in checked:
            waiting.failure = exc
        return
    for waiting, denied in zip(checked, verdicts, strict=True):
        waiting.denied = denied


def _decide(batch: list[_Waiting], failure: BaseException | None = None) -> None:
    for waiting in batch:
        if failure is not None:
            waiting.failure = waiting.failure or failure
        if not waiting.decided.done():
            waiting.decided.set_result(None)


async def _run(project_id: int, queue: _ProjectQueue) -> None:
    """Admits the project's waiting calls, a batch at a time, until none is left."""
    try:
        while queue.waiting:
            batch, queue.waiting = queue.waiting[:MAX_BATCH], queue.waiting[MAX_BATCH:]
            try:
                await _admit_batch(project_id, batch)
            except Exception as exc:
                _decide(batch, exc)
            except BaseException as exc:  # cancelled: the event loop is closing
                _decide(batch + queue.waiting, exc)
                queue.waiting = []
                raise
            else:
                _decide(batch)
    finally:
        queue.runner = None


def _enqueue(waiting: _Waiting) -> None:
    loop = asyncio.get_running_loop()
    queues = _queues.setdefault(loop, {})
    project_id = waiting.call.project.pk
    queue = queues.setdefault(project_id, _ProjectQueue())
    queue.waiting.append(waiting)
    if queue.runner is None:
        queue.runner = loop.create_task(_run(project_id, queue))


def _take_admission(waiting: _Waiting) -> None:
    """An admitted call holds what it reserved, settled when it ends; a refused call reserved
    nothing and is not counted."""
    if waiting.claim is not None and waiting.claim.admission.reserved:
        waiting.call.admission = waiting.claim.admission


async def admit(call: Call, *, tokens: int, spends: list[Spend], dearest_of: Sequence[Spend] = ()) -> None:
    """Admits the call, reserving ``tokens`` and the price of ``spends`` (and of the dearest of
    ``dearest_of``) until it settles, or refuses it (429, or 403 for an unpriced model under a
    dollar budget). Either way the call carries the headers of its configured limits."""
    project, key = call.project, call.key
    checks = limits.plan(project=project, key=key, estimate_tokens=tokens)
    if not checks:
        # Nothing to check: the call counts when it settles.
        windows = usage.admission_windows(timezone.now())
        call.admission = usage.Admission(project_id=project.pk, key_id=key.pk, windows=windows)
        return
    waiting = _Waiting(call, checks, tokens, spends, dearest_of, asyncio.get_running_loop().create_future())
    _enqueue(waiting)
    try:
        await asyncio.shield(waiting.decided)
    except asyncio.CancelledError:
        # The client left, but its batch may be reserving for it right now: the call ends (and
        # is queued to settle) only once it knows what it holds.
        await asyncio.wait([waiting.decided])
        _take_admission(waiting)
        raise
    _take_admission(waiting)
    _conclude(waiting)


async def top_up(call: Call, *, tokens: int, spends: list[Spend], dearest_of: Sequence[Spend] = ()) -> None:
    """Adds ``tokens`` and the price of ``spends`` (and of the dearest of ``dearest_of``) to an
    admitted call's reservation, in the windows it was admitted in: what a RAG call learns it
    will send once retrieval has found its context. Refused (429) when its budgets, counted
    without its own reservation, are reached, or when its tokens no longer fit the minute; the
    call keeps what it reserved, to settle with what it spent so far."""
    admission = call.admission
    if admission is None or not admission.reserved or not (tokens or spends):
        # No limit to check (or the counters could not be reached at admission): it counts when it settles.
        return
    checks = limits.top_up_plan(
        project=call.project,
        key=call.key,
        held_tokens=admission.reserved_tokens,
        held_micros=admission.reserved_micros,
        estimate_tokens=tokens,
    )
    if not checks:
        return
    waiting = _Waiting(call, checks, tokens, spends, dearest_of, asyncio.get_running_loop().create_future())
    waiting.now = timezone.now()
    waiting.claim = usage.Claim(admission=admission, checks=checks, tokens=tokens, micros=0, requests=0)
    # Alone: its windows are the call's, which a batch of admissions now may not share.
    checked = asyncio.ensure_future(_check_batch([waiting]))
    try:
        await asyncio.shield(checked)
    except asyncio.CancelledError:
        # The client left: the call settles only once it knows what it holds.
        await asyncio.wait([checked])
        raise
    except Exception as exc:
        waiting.failure = exc
    _conclude(waiting)


def _conclude(waiting: _Waiting) -> None:
    call, checks, now = waiting.call, waiting.checks, waiting.now
    if waiting.unpriced_model is not None:
        raise Forbidden(
            f"model {waiting.unpriced_model!r} has no price, and this call is under a dollar budget; "
            "an admin must price it first",
            code="unpriced_model",
        )
    if waiting.failure is not None:
        if not isinstance(waiting.failure, psycopg.Error):
            raise waiting.failure
        project_id = call.project.pk
        if any(check.kind in limits.BUDGETS for check in checks):
            logger.error("limit check failed for project %s", project_id, exc_info=waiting.failure)
            raise Unavailable("limit check failed; retry shortly", code="limit_check_failed")
        # Minute limits only: better a call past them than an outage. It counts when it settles.
        if call.admission is None:
            call.admission = waiting.claim.admission
        logger.error(
            "minute limits of project %s not checked: the counters cannot be reached",
            project_id,
            exc_info=waiting.failure,
        )
        metrics.increment(metrics.LIMITS_UNCHECKED)
        return
    denied, counters = waiting.denied, waiting.claim.admission.counters
    # A top-up's checks update the headers of the limits it checked.
    call.limit_headers.update(limits.limit_headers(checks, counters, now, denied))
    if denied is not None:
        refusal = limits.denial(denied, counters[denied.tier, denied.kind.period], now)
        error = RateLimited(refusal.message, code=refusal.code, openai_type=refusal.error_type)
        error.scope, error.retry_after = refusal.scope, refusal.retry_after
        metrics.increment(metrics.LIMITS_DENIED, code=refusal.code, scope=refusal.scope)
        raise error


# --------------------------------------------------------------------------------------------
# Release: a call's reservation gives way to its spend as soon as its answer ends
# --------------------------------------------------------------------------------------------


@dataclass(eq=False)
class _Releasing:
    call: Call
    admission: usage.Admission
    done: asyncio.Future


# Per event loop: the calls whose answers ended while the last release statement ran.
_releases: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[_Releasing]] = weakref.WeakKeyDictionary()
_release_runners: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task] = weakref.WeakKeyDictionary()


async def _release_batch(batch: list[_Releasing]) -> None:
    """One price read and one settlement statement for the batch, priced as the rows will be."""
    types = sorted({spend.provider_type for releasing in batch for spend in releasing.call.spends})
    rows = await selectors.prices_of(provider_types=types) if types else []
    await usage.settle_async(
        settlements=[
            settlement(releasing.call, releasing.admission, price(releasing.call.spends, rows)[0])
            for releasing in batch
        ]
    )


async def _run_releases(loop: asyncio.AbstractEventLoop) -> None:
    try:
        while batch := _releases.pop(loop, []):
            try:
                async with asyncio.timeout(RELEASE_SECONDS):
                    await _release_batch(batch)
            except Exception:
                logger.exception("usage counters of %d ended calls not released; their rows settle them", len(batch))
                released = False
            else:
                released = True
            for releasing in batch:
                releasing.done.set_result(released)
    finally:
        _release_runners.pop(loop, None)


async def release(call: Call) -> None:
    """Settles an admitted call whose answer has ended: its reservation stops counting now, not
    when the ledger writes its row (which then has nothing left to settle). The calls that end
    while a release statement runs go in the next one. A release that cannot be written leaves
    the call to be settled with its row."""
    admission = call.admission
    if admission is None or not admission.reserved:
        return
    loop = asyncio.get_running_loop()
    releasing = _Releasing(call, admission, loop.create_future())
    # Taken from the call: the ledger must not settle it a second time.
    call.admission = None
    _releases.setdefault(loop, []).append(releasing)
    if loop not in _release_runners:
        _release_runners[loop] = loop.create_task(_run_releases(loop))
    if not await asyncio.shield(releasing.done):
        call.admission = admission
