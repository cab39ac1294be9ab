"""The route's pure choices: the weighted order, the failover order, which failures fail over,
and how long a target cools."""

from collections import Counter

import pytest

from gateway.connections import routing
from gateway.connections.models import RouteStrategy
from gateway.connections.providers.upstream_errors import failure_kind
from ragmux.core.errors import UpstreamFailed, UpstreamTimeout


def picks(weights, calls, balancer=None):
    balancer = balancer or routing.SmoothWeightedRoundRobin()
    return [balancer.pick("route", weights) for _ in range(calls)]


def test_weights_three_to_one_split_exactly_over_400_calls():
    assert Counter(picks([("a", 3), ("b", 1)], 400)) == {"a": 300, "b": 100}


def test_weighted_picks_are_spread_not_bursts():
    # nginx's smooth sequence for 5:1:1 is a a b a c a a: never all of a first.
    assert picks([("a", 5), ("b", 1), ("c", 1)], 7) == ["a", "a", "b", "a", "c", "a", "a"]


def test_every_process_makes_the_same_picks():
    assert picks([("a", 2), ("b", 3)], 50) == picks([("a", 2), ("b", 3)], 50)


def test_routes_are_balanced_apart():
    balancer = routing.SmoothWeightedRoundRobin()
    assert balancer.pick("one", [("a", 1), ("b", 1)]) == "a"
    assert balancer.pick("two", [("a", 1), ("b", 1)]) == "a"
    assert balancer.pick("one", [("a", 1), ("b", 1)]) == "b"


def test_a_target_left_out_keeps_the_others_in_proportion():
    balancer = routing.SmoothWeightedRoundRobin()
    assert set(picks([("a", 3), ("c", 1)], 8, balancer)) == {"a", "c"}
    assert Counter(picks([("a", 3), ("c", 1)], 400, balancer)) == {"a": 300, "c": 100}


def test_no_candidate_is_an_error():
    with pytest.raises(ValueError):
        routing.SmoothWeightedRoundRobin().pick("route", [])


def test_ordered_tries_the_targets_as_listed():
    order = routing.attempt_order(
        RouteStrategy.ORDERED, [(2, 9), (0, 1), (1, 1)], route="r", balancer=routing.SmoothWeightedRoundRobin()
    )
    assert order == [2, 0, 1]


def test_weighted_tries_the_pick_first_then_the_rest_in_order():
    balancer = routing.SmoothWeightedRoundRobin()
    candidates = [(0, 1), (1, 3), (2, 1)]
    assert routing.attempt_order(RouteStrategy.WEIGHTED, candidates, route="r", balancer=balancer) == [1, 0, 2]
    assert routing.attempt_order(RouteStrategy.WEIGHTED, candidates, route="r", balancer=balancer) == [0, 1, 2]


def relayed(status: int, retry_after: int | None = None) -> UpstreamFailed:
    return UpstreamFailed.relayed(
        "no", status=status, openai_type="x", code=None, retryable=False, retry_after=retry_after
    )


@pytest.mark.parametrize(
    ("failure", "kind", "moves_on"),
    [
        (UpstreamTimeout("slow"), "timeout", True),
        (UpstreamFailed("refused", code="upstream_unreachable", retryable=True), "connect", True),
        (relayed(429), "http_429", True),
        (relayed(500), "http_5xx", True),
        (relayed(503), "http_5xx", True),
        (relayed(401), "http_401", True),
        (relayed(403), "http_403", True),
        (relayed(400), "http_400", False),
        (relayed(422), "http_422", False),
        (relayed(404), "http_404", False),
        (UpstreamFailed("bad", code="upstream_malformed"), "upstream_malformed", False),
        (UpstreamFailed("too big", code="upstream_unreachable", retryable=False), "upstream_unreachable", False),
    ],
)
def test_which_failures_fail_over(failure, kind, moves_on):
    assert failure_kind(failure) == kind
    assert routing.fails_over(kind) is moves_on


@pytest.mark.parametrize(
    "outcome, cools",
    [("http_5xx", True), ("timeout", True), ("unusable", True), ("unsupported", False), ("http_400", False)],
)
def test_a_target_that_was_never_called_counts_toward_no_cooldown(outcome, cools):
    assert routing.cools_down(outcome) is cools


def test_a_longer_retry_after_sets_the_cooldown():
    assert routing.cooldown_seconds(cooldown=30, retry_after=None) == 30
    assert routing.cooldown_seconds(cooldown=30, retry_after=5) == 30
    assert routing.cooldown_seconds(cooldown=30, retry_after=120) == 120
    assert not routing.cools_at_once(cooldown=30, retry_after=None)
    assert not routing.cools_at_once(cooldown=30, retry_after=30)
    assert routing.cools_at_once(cooldown=30, retry_after=31)


def test_retry_after_of_a_cooling_route_is_its_first_cooldown_end():
    assert routing.retry_after_header(cooling_until=[130.2, 110.5], now=100.0) == 11
    assert routing.retry_after_header(cooling_until=[100.1], now=100.0) == 1
