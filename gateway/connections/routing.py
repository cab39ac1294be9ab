"""A route's choices, as plain functions: which targets a call tries and in what order, which
failures move it to the next target, and how long a failing target is left alone.

The engine that makes the calls is `gateway.connections.failover`; the cooldowns it reads and
writes are `gateway.connections.cooldowns`. Nothing here touches the network, the database or a
clock of its own.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

from gateway.connections.models import RouteStrategy

# The failures that move a routed call to its next target: the target could not be reached or
# did not answer in time, was overloaded or failing, or refused its own credential. A request
# the target found bad (400, 422, ...) would be as bad for the next one, and is answered as is.
# ``unusable`` is a target ragmux cannot call at all (its key no longer decrypts); ``unsupported``
# one whose provider has no way to do what a well-formed request asks (Anthropic has no JSON
# mode), which the next target may have.
FAILS_OVER = frozenset(
    {"timeout", "connect", "http_429", "http_5xx", "http_401", "http_403", "unusable", "unsupported"}
)
# The failures that say nothing of a target's health, so count toward no cooldown: it was never
# called.
NOT_COOLED = frozenset({"unsupported"})
OK = "ok"


def fails_over(outcome: str) -> bool:
    return outcome in FAILS_OVER


def cools_down(outcome: str) -> bool:
    return outcome in FAILS_OVER and outcome not in NOT_COOLED


class SmoothWeightedRoundRobin:
    """nginx's smooth weighted round-robin, per route, in this process.

    Each pick adds every candidate's weight to its running score, takes the highest score (the
    first on a tie) and takes the candidates' total weight off the winner. Over any run of
    ``sum(weights)`` picks among the same candidates each is picked exactly its weight's number
    of times, spread out rather than in bursts (3:1 gives a a b a, a a b a, ...), and the order is
    the same in every process given the same calls.
    """

    def __init__(self) -> None:
        self._scores: dict[Hashable, dict[Hashable, int]] = {}

    def pick(self, route: Hashable, weights: Sequence[tuple[Hashable, int]]) -> Hashable:
        """The candidate (a key of ``weights``) the next call of ``route`` goes to first. A
        candidate left out (cooling down) keeps its score for when it is back, as nginx's
        peers that are down do."""
        if not weights:
            raise ValueError("no candidate to pick from")
        scores = self._scores.setdefault(route, {})
        best, best_score, total = None, -math.inf, 0
        for key, weight in weights:
            score = scores.get(key, 0) + weight
            scores[key] = score
            total += weight
            if score > best_score:
                best, best_score = key, score
        scores[best] -= total
        return best


def attempt_order(
    strategy: str, candidates: Sequence[tuple[Hashable, int]], *, route: Hashable, balancer: SmoothWeightedRoundRobin
) -> list[Hashable]:
    """The keys of ``candidates`` (in the route's order, with their weights; cooling targets
    already left out) in the order a call tries them: as listed for ``ordered``; for
    ``weighted``, the balancer's pick first, then the rest as listed."""
    keys = [key for key, _ in candidates]
    if strategy != RouteStrategy.WEIGHTED or len(keys) < 2:
        return keys
    first = balancer.pick(route, candidates)
    return [first, *(key for key in keys if key != first)]


def cooldown_seconds(*, cooldown: float, retry_after: int | None) -> float:
    """How long a target that reached the failure threshold is skipped: ROUTE_COOLDOWN, or the
    target's own `Retry-After` when that asks for longer."""
    return max(cooldown, float(retry_after or 0))


def cools_at_once(*, cooldown: float, retry_after: int | None) -> bool:
    """A target that asks (`Retry-After` on a 429) to be left alone for longer than a cooldown
    is cooled by that one answer, without waiting for the failure threshold."""
    return retry_after is not None and retry_after > cooldown


def retry_after_header(*, cooling_until: Sequence[float], now: float) -> int:
    """The `Retry-After` of a route whose every target is cooling down: the seconds until the
    first of them may be tried again (at least 1)."""
    return max(1, math.ceil(min(cooling_until) - now))
