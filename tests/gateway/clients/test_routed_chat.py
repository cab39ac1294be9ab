"""Chats sent to a route: failover, cooldowns shared by web processes, weighted balance, the
ledger's record of the attempts; against three fake upstreams on 127.0.0.1."""

from __future__ import annotations

import json
import time
from collections import Counter

import httpx
import pytest

from tests.helpers import wait_for_logs

MESSAGES = [{"role": "user", "content": "What is the launch code for Project Falcon?"}]
ROUTE = "falcon-smart"
# The second target's own first-byte timeout, far below the global one.
TARGET_FIRST_BYTE_TIMEOUT = 0.5


pytestmark = pytest.mark.usefixtures("fresh_cooldowns")


def make_route(upstreams, *, strategy="ordered", weights=None, name=ROUTE):
    """A chat route of one target per upstream, in order; the second with its own timeout."""
    from gateway.connections.services import connection_create
    from tests.factories import RouteFactory, RouteTargetFactory

    route = RouteFactory(name=name, strategy=strategy)
    for position, upstream in enumerate(upstreams):
        connection = connection_create(
            name=f"{name}-target-{position}",
            provider_type="openai",
            base_url=f"{upstream.url}/v1",
            model_name="gpt-4o-mini",
            dimensions=None,
            api_key="sk-fake-chat-key-0000000000",
        )
        RouteTargetFactory(
            route=route,
            connection=connection,
            weight=(weights or [1] * len(upstreams))[position],
            first_byte_timeout=TARGET_FIRST_BYTE_TIMEOUT if position == 1 else None,
        )
    return route


@pytest.fixture
def route(upstreams, settings):
    settings.UPSTREAM_FIRST_BYTE_TIMEOUT = 30
    return make_route(upstreams)


@pytest.fixture
def routed_key(project, route) -> str:
    """A key of a project that may call the route by name."""
    from gateway.clients.services import key_create

    project.allowed_routes.add(route)
    return key_create(project=project, name="routed", scopes=None, expires_at=None).key


def chat(client: httpx.Client, *, stream: bool = False, model: str = ROUTE) -> httpx.Response:
    return client.post("/chat/completions", json={"model": model, "messages": MESSAGES, "stream": stream})


def frames(response: httpx.Response) -> list[str]:
    return [line.removeprefix("data: ") for line in response.text.split("\n\n") if line]


def calls(upstreams) -> list[int]:
    return [upstream.calls("openai.chat") for upstream in upstreams]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "streamed"])
def test_a_failing_and_a_silent_target_are_passed_over_for_the_third(v1, project, routed_key, upstreams, stream):
    upstreams[0].configure("openai.chat", status=500)
    upstreams[1].configure("openai.chat", latency=10)
    started = time.monotonic()
    response = chat(v1(routed_key), stream=stream)
    elapsed = time.monotonic() - started
    assert response.status_code == 200
    if stream:
        assert frames(response)[-1] == "[DONE]"
        assert "AMBER-7731" in "".join(
            json.loads(frame)["choices"][0]["delta"].get("content", "")
            for frame in frames(response)[:-1]
            if json.loads(frame)["choices"]
        )
        assert json.loads(frames(response)[0])["model"] == ROUTE
    else:
        assert "AMBER-7731" in response.json()["choices"][0]["message"]["content"]
        assert response.json()["model"] == ROUTE
    # The silent target was given up on at its own timeout, not the global 30 s.
    assert elapsed < TARGET_FIRST_BYTE_TIMEOUT + 5
    assert calls(upstreams) == [1, 1, 1]
    [row] = wait_for_logs(1, project=project)
    assert (row.status_code, row.route_name, row.target) == (200, ROUTE, f"{ROUTE}-target-2")
    assert [(a["target"], a["outcome"]) for a in row.attempts] == [
        (f"{ROUTE}-target-0", "http_5xx"),
        (f"{ROUTE}-target-1", "timeout"),
        (f"{ROUTE}-target-2", "ok"),
    ]
    assert row.attempts[1]["ms"] >= TARGET_FIRST_BYTE_TIMEOUT * 1000 - 50
    assert row.model == "gpt-4o-mini"


def test_a_failing_target_cools_down_for_every_web_process(
    v1, project, routed_key, upstreams, settings, subprocess_env, start_web_process
):
    settings.ROUTE_COOLDOWN_FAILURES, settings.ROUTE_COOLDOWN = 2, 2
    subprocess_env.update(ROUTE_COOLDOWN_FAILURES="2", ROUTE_COOLDOWN="2")
    other = start_web_process()
    upstreams[0].configure("openai.chat", status=500)
    here = v1(routed_key)
    there = httpx.Client(base_url=f"{other.url}/v1", headers={"Authorization": f"Bearer {routed_key}"}, timeout=30)
    with there:
        for _ in range(2):
            assert chat(here).status_code == 200
        assert calls(upstreams)[:2] == [2, 2]
        # Cooling: neither process calls it, the other one included.
        assert chat(there).status_code == 200
        assert chat(here, stream=True).status_code == 200
        assert calls(upstreams)[:2] == [2, 4]
        time.sleep(settings.ROUTE_COOLDOWN + 0.2)
        assert chat(there).status_code == 200
    assert calls(upstreams)[:2] == [3, 5]
    rows = wait_for_logs(5, project=project)
    assert sorted(len(row.attempts) for row in rows) == [1, 1, 2, 2, 2]


def test_a_stream_failing_after_its_first_byte_ends_with_an_error_frame(v1, project, routed_key, upstreams, settings):
    settings.UPSTREAM_IDLE_TIMEOUT = 1
    upstreams[0].configure("openai.chat", stall_after=2)
    response = chat(v1(routed_key), stream=True)
    assert response.status_code == 200
    assert frames(response)[-1] == "[DONE]"
    assert json.loads(frames(response)[-2])["error"]["code"] == "upstream_timeout"
    assert calls(upstreams) == [1, 0, 0]
    [row] = wait_for_logs(1, project=project)
    assert (row.status_code, row.target) == (504, f"{ROUTE}-target-0")
    assert [a["outcome"] for a in row.attempts] == ["timeout"]


def test_a_stream_its_upstream_drops_says_so_is_logged_failed_and_cools_the_target(
    v1, project, routed_key, upstreams, settings
):
    settings.ROUTE_COOLDOWN_FAILURES, settings.ROUTE_COOLDOWN = 2, 30
    upstreams[0].configure("openai.chat", reset_after=3)
    client = v1(routed_key)
    for _ in range(2):
        response = chat(client, stream=True)
        assert response.status_code == 200
        assert frames(response)[-1] == "[DONE]"
        message = json.loads(frames(response)[-2])["error"]["message"]
        assert message == "the upstream closed the stream in the middle of its answer (after 3 chunks)"
    rows = wait_for_logs(2, project=project)
    assert {row.error for row in rows} == {
        f"{upstreams[0].url} closed the stream in the middle of its answer (after 3 chunks)"
    }
    assert [(row.status_code, [a["outcome"] for a in row.attempts]) for row in rows] == [
        (502, ["upstream_unreachable"]),
        (502, ["upstream_unreachable"]),
    ]
    # Two failures cooled the target: the next streams go to the second one.
    for _ in range(3):
        assert frames(chat(client, stream=True))[-1] == "[DONE]"
    assert calls(upstreams)[:2] == [2, 3]


def test_a_bad_request_is_answered_without_failing_over(v1, project, routed_key, upstreams):
    upstreams[0].configure("openai.chat", status=400)
    response = chat(v1(routed_key))
    assert response.status_code == 400
    assert calls(upstreams) == [1, 0, 0]


def test_weights_of_three_to_one_split_400_calls_300_to_100(v1, chat_connection, upstreams):
    from gateway.clients.services import key_create, project_create

    route = make_route(upstreams[:2], strategy="weighted", weights=[3, 1], name="falcon-weighted")
    # Without a store: 400 calls need no retrieval.
    project = project_create(
        name="weighted",
        chat_connection_id=chat_connection.id,
        embedding_connection_id=None,
        store_id=None,
        system_prompt="",
    )
    project.allowed_routes.add(route)
    client = v1(key_create(project=project, name="weighted", scopes=None, expires_at=None).key)
    for _ in range(400):
        assert chat(client, model="falcon-weighted").status_code == 200
    assert calls(upstreams)[:2] == [300, 100]
    rows = wait_for_logs(400, project=project)
    assert Counter(row.target for row in rows) == {"falcon-weighted-target-0": 300, "falcon-weighted-target-1": 100}


def test_a_route_whose_targets_all_cool_answers_503_with_retry_after(v1, project, routed_key, upstreams, settings):
    settings.ROUTE_COOLDOWN_FAILURES, settings.ROUTE_COOLDOWN = 1, 30
    upstreams[1].configure("openai.chat", status=503)
    upstreams[2].configure("openai.chat", status=429, retry_after=90)
    upstreams[0].configure("openai.chat", status=500)
    client = v1(routed_key)
    failed = chat(client)
    # The last target's own error, in OpenAI's envelope.
    assert failed.status_code == 429
    assert failed.json()["error"]["type"] == "rate_limit_error"
    assert "fake upstream failure 429" in failed.json()["error"]["message"]
    cooling = chat(client)
    assert cooling.status_code == 503
    assert cooling.json()["error"]["code"] == "route_cooling_down"
    assert 28 <= int(cooling.headers["Retry-After"]) <= 30
    assert calls(upstreams) == [1, 1, 1]
    rows = wait_for_logs(2, project=project)
    assert [(row.status_code, len(row.attempts)) for row in rows] == [(429, 3), (503, 0)]


def test_with_redis_down_each_process_keeps_its_own_cooldowns(
    v1, project, routed_key, upstreams, settings, redis_unreachable
):
    settings.ROUTE_COOLDOWN_FAILURES = 1
    upstreams[0].configure("openai.chat", status=500)
    client = v1(routed_key)
    for _ in range(3):
        assert chat(client).status_code == 200
    assert calls(upstreams)[:2] == [1, 3]


def test_the_projects_chat_route_answers_any_model_name(v1, project, route, upstreams):
    from gateway.clients.services import key_create, project_update

    project_update(project=project, chat_route_id=route.id, chat_connection_id=None)
    upstreams[0].configure("openai.chat", status=503)
    response = chat(v1(key_create(project=project, name="k", scopes=None, expires_at=None).key), model="anything")
    assert response.status_code == 200
    assert calls(upstreams) == [1, 1, 0]
    [row] = wait_for_logs(1, project=project)
    assert (row.route_name, row.target) == (ROUTE, f"{ROUTE}-target-1")


def test_a_model_naming_no_allowed_route_goes_to_the_projects_connection(v1, project, project_key, route, upstreams):
    response = chat(v1(project_key), model=ROUTE)
    assert response.status_code == 200
    assert calls(upstreams) == [0, 0, 0]
    [row] = wait_for_logs(1, project=project)
    assert (row.route_name, row.target, row.attempts) == ("", "", [])


def price_targets(cheap_per_mtok: int, dear_per_mtok: int) -> None:
    """The route's targets ask for gpt-4o-mini, priced ``cheap_per_mtok``, but the second asks
    for `dear-model`, priced ``dear_per_mtok`` (dollars a million tokens, in and out alike)."""
    from gateway.connections.models import ModelPrice, RouteTarget

    RouteTarget.objects.filter(route__name=ROUTE, position=1).update(model_name="dear-model")
    for model, rate in (("gpt-4o-mini", cheap_per_mtok), ("dear-model", dear_per_mtok)):
        ModelPrice.objects.update_or_create(
            provider_type="openai", model=model, defaults={"input_per_mtok": rate, "output_per_mtok": rate}
        )


def test_the_answering_target_prices_the_call(v1, project, routed_key, upstreams):
    price_targets(cheap_per_mtok=1, dear_per_mtok=1000)
    upstreams[0].configure("openai.chat", status=500)
    usage = chat(v1(routed_key)).json()["usage"]
    [row] = wait_for_logs(1, project=project)
    assert (row.target, row.model) == (f"{ROUTE}-target-1", "dear-model")
    # 1000 $ a million tokens is 1000 micro-dollars a token; the query's embedding is the store's.
    chat_micros = (usage["prompt_tokens"] + usage["completion_tokens"]) * 1000
    assert chat_micros <= row.cost_micros < chat_micros + 1000


def test_a_dollar_budget_reserves_the_dearest_targets_price(v1, project, routed_key, upstreams):
    from django.db import connection

    from gateway.clients.models import Project, UsageCounter

    price_targets(cheap_per_mtok=1, dear_per_mtok=1000)
    Project.objects.filter(pk=project.pk).update(budget_monthly_usd_micros=10**12)
    reserved: list[tuple[int, int]] = []

    def read_reservation(request) -> None:
        # The first target is called while the call's reservation is held.
        reserved.extend(
            UsageCounter.objects.filter(tier="project", owner_id=project.pk, period="month").values_list(
                "reserved_tokens", "reserved_micros"
            )
        )
        connection.close()

    upstreams[0].on_request = read_reservation
    assert chat(v1(routed_key)).status_code == 200
    [(tokens, micros)] = reserved
    # Priced as if the dear target answered (the query's embedding adds its own few micros).
    assert tokens * 1000 <= micros < tokens * 1000 + 1000


def test_attempts_failovers_and_cooling_targets_are_measured(v1, api, routed_key, upstreams, settings, metrics_on):
    from prometheus_client import REGISTRY

    from tests.ragmux.core.test_metrics import metric_lines

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, {"route": ROUTE, **labels}) or 0.0

    settings.ROUTE_COOLDOWN_FAILURES = 1
    upstreams[0].configure("openai.chat", status=500)
    before = [sample("ragmux_route_attempts_total", outcome=o) for o in ("http_5xx", "ok")]
    failovers = sample("ragmux_route_failovers_total")
    for _ in range(2):
        assert chat(v1(routed_key)).status_code == 200
    after = [sample("ragmux_route_attempts_total", outcome=o) for o in ("http_5xx", "ok")]
    assert [b - a for a, b in zip(before, after, strict=True)] == [1, 2]
    assert sample("ragmux_route_failovers_total") - failovers == 1
    assert f'ragmux_route_targets_cooling{{route="{ROUTE}"}} 1.0' in metric_lines(api())
