"""The one failover engine: how a call over a route's targets (or one connection alone) gets its
answer. A `/v1` chat, a `/v1/rerank` call and a store's rerank all run through :func:`answer`;
the caller says how a target is opened (a chat adapter, a reranker) and what one attempt is.

Inside a route the failover is the retry: each target is called once, within its own first-byte
timeout, in the order `routing.attempt_order` gives (ordered, or smooth weighted round-robin;
cooling targets left out, see `gateway.connections.cooldowns`). A failure `routing.fails_over`
names moves the call on and counts towards the target's cooldown; any other failure is the
answer. Only what happens before the first byte reaches the client can move a call: a stream is
handed to the client after its first chunk was read, and what fails after that ends the stream.
Each attempt is kept (target, outcome, milliseconds) for the caller's record and counted in the
route metrics. A plan of one connection alone is called once, with the adapter's own retries.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gateway.connections import cooldowns, routing
from gateway.connections.models import ModelConnection, RouteStrategy
from gateway.connections.providers.chat import ChatProvider, NoChat, SingleAttempt, chat_provider
from gateway.connections.providers.chat_request import ProviderCannot
from gateway.connections.providers.rerank import NoRerank
from gateway.connections.providers.upstream_errors import failure_kind
from ragmux.core import metrics
from ragmux.core.crypto import DecryptionFailed
from ragmux.core.errors import ServerFault, ServiceError, Unavailable, UpstreamFailed

T = TypeVar("T")

# One balancer per process: the weighted choice is deterministic within a process.
balancer = routing.SmoothWeightedRoundRobin()


class RouteCoolingDown(Unavailable):
    """Every target of the route is cooling down."""

    code = "route_cooling_down"


@dataclass(frozen=True)
class Target:
    """One place a call can be answered: a connection, the model asked of it, its weight in a
    weighted route and its own first-byte timeout (None: the adapter's default)."""

    connection: ModelConnection
    model: str
    weight: int = 1
    first_byte_timeout: float | None = None

    @property
    def cooldown_key(self) -> str:
        return cooldowns.target_key(self.connection.pk, self.model)


@dataclass(frozen=True)
class Plan:
    """A call's targets: a route's (``route`` its name), or one connection alone."""

    targets: list[Target]
    route: str = ""
    strategy: str = RouteStrategy.ORDERED

    @classmethod
    def of_connection(cls, connection: ModelConnection) -> Plan:
        return cls([Target(connection, connection.model_name)])

    @classmethod
    def of_route(cls, route, targets: Sequence) -> Plan:
        """A route's plan from its row and its target rows (in position order, connections loaded)."""
        return cls(
            [
                Target(target.connection, target.effective_model_name, target.weight, target.first_byte_timeout)
                for target in targets
            ],
            route=route.name,
            strategy=route.strategy,
        )


@dataclass
class Attempts:
    """The target a call is being answered by (the last one tried), once it is known, and the
    attempts a route made, in order."""

    current: Target
    made: list[dict] = field(default_factory=list)


Attempt = Callable[[Any, SingleAttempt | None], Awaitable[T]]


def _provider(target: Target) -> ChatProvider:
    return chat_provider(target.connection, model=target.model)


def _no_one_told(target: Target) -> None:
    return None


async def answer(
    plan: Plan,
    attempts: Attempts,
    attempt: Attempt,
    *,
    open_target: Callable[[Target], Any] = _provider,
    trying: Callable[[Target], None] = _no_one_told,
) -> T:
    """``attempt``'s result from the first target that answers; the last failure when none does.

    ``attempt(opened, once)`` makes the call with what ``open_target`` made of the target (a chat
    adapter unless told otherwise; ``once`` None: with the adapter's own retries). Through a
    route, ``trying(target)`` is told of each target before it is called.
    ``attempts.current`` is the target of the attempt made last, so the caller prices and logs by
    it, whatever the outcome."""
    if not plan.route:
        return await attempt(open_target(plan.targets[0]), None)
    order = await _order(plan)
    failure: ServiceError | None = None
    for number, target in enumerate(order):
        if number:
            metrics.increment(metrics.ROUTE_FAILOVERS, route=plan.route)
        attempts.current = target
        trying(target)
        started = time.monotonic()
        try:
            result = await attempt(open_target(target), SingleAttempt(target.first_byte_timeout))
        except UpstreamFailed as exc:
            outcome, failure, retry_after = failure_kind(exc), exc, exc.retry_after
        except ProviderCannot as exc:
            outcome, failure, retry_after = "unsupported", exc, None
        except (NoChat, NoRerank, DecryptionFailed) as exc:
            outcome, retry_after = "unusable", None
            failure = ServerFault(f"route target {target.connection.name!r} is unusable: {exc}", code="target_unusable")
        else:
            _record(attempts, plan.route, target, routing.OK, started)
            return result
        _record(attempts, plan.route, target, outcome, started)
        if not routing.fails_over(outcome):
            raise failure
        if routing.cools_down(outcome):
            await cooldowns.failed(target.cooldown_key, retry_after=retry_after if outcome == "http_429" else None)
    raise failure


# The gateway's own bounds on a stream (STREAM_MAX_DURATION, STREAM_MAX_BYTES_MB): reaching them is
# no failure of the target's.
STREAM_BOUNDS = frozenset({"stream_max_duration", "stream_max_bytes"})


async def failed_mid_stream(attempts: Attempts, exc: UpstreamFailed) -> None:
    """A route's target that failed after its stream had begun reaching the client: the call
    cannot move any more, but its attempt says it failed, and the failure counts toward the
    target's cooldown like one before the first byte."""
    if not attempts.made:
        return
    outcome = failure_kind(exc)
    attempts.made[-1]["outcome"] = outcome
    await cooldowns.failed(attempts.current.cooldown_key, retry_after=None)


async def _order(plan: Plan) -> list[Target]:
    """The route's targets that are not cooling down, in the order they are tried."""
    cooling = await cooldowns.cooling(list({target.cooldown_key for target in plan.targets}))
    candidates = [
        (index, target.weight) for index, target in enumerate(plan.targets) if target.cooldown_key not in cooling
    ]
    if not candidates:
        error = RouteCoolingDown(f"every target of route {plan.route!r} is cooling down after repeated failures")
        error.retry_after = routing.retry_after_header(cooling_until=list(cooling.values()), now=time.time())
        raise error
    order = routing.attempt_order(plan.strategy, candidates, route=plan.route, balancer=balancer)
    return [plan.targets[index] for index in order]


def _record(attempts: Attempts, route: str, target: Target, outcome: str, started: float) -> None:
    attempts.made.append(
        {
            "target": target.connection.name,
            "model": target.model,
            "outcome": outcome,
            "ms": int((time.monotonic() - started) * 1000),
        }
    )
    metrics.increment(metrics.ROUTE_ATTEMPTS, route=route, outcome=outcome)
