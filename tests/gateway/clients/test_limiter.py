"""Rate limits and budgets enforced on `/v1`, over real HTTP: exact under concurrency across two
production web processes, the 429s and their headers, and what a denied call costs (nothing)."""

from __future__ import annotations

import asyncio
import math
import time
from datetime import UTC, datetime
from decimal import Decimal

import httpx
import pytest

from tests.fakes.upstream import CHAT_ANSWER
from tests.helpers import wait_for_logs

# A message of this many words is this many tokens both for the gateway's estimate (4 characters
# a token) and for the fake upstream's count (a word a token); `max_tokens` set to its answer's
# words makes the estimate of the completion exact too.
PROMPT_WORDS = 20
ANSWER_TOKENS = len(CHAT_ANSWER.split())
CALL_TOKENS = PROMPT_WORDS + ANSWER_TOKENS
CHAT = {
    "model": "any",
    "messages": [{"role": "user", "content": " ".join(["abc"] * PROMPT_WORDS)}],
    "max_tokens": ANSWER_TOKENS,
}
# The priced model's rates: a micro-dollar per input token, two per output token.
CALL_MICROS = PROMPT_WORDS * 1 + ANSWER_TOKENS * 2
CALLS = 50


@pytest.fixture
def priced_connection(fake_upstream, transactional_db):
    from gateway.connections.services import connection_create, price_create

    price_create(
        provider_type="openai",
        model="budget-model",
        input_per_mtok=Decimal(1),
        output_per_mtok=Decimal(2),
        cached_input_per_mtok=None,
        cache_write_per_mtok=None,
        per_search_unit=None,
    )
    return connection_create(
        name="priced-chat",
        provider_type="openai",
        base_url=f"{fake_upstream.url}/v1",
        model_name="budget-model",
        dimensions=None,
        api_key="sk-fake-chat-key-0000000000",
    )


@pytest.fixture
def limited(priced_connection):
    """``limited(project_limits, key_limits)`` is a key (plaintext) of a new project without a store or
    system prompt, the project and the key each with those limits."""
    from gateway.clients.services import key_create, project_create

    def make(project_limits: dict | None = None, key_limits: dict | None = None) -> str:
        project = project_create(
            name="limited",
            chat_connection_id=priced_connection.id,
            embedding_connection_id=None,
            store_id=None,
            system_prompt="",
            **(project_limits or {}),
        )
        return key_create(project=project, name="k", scopes=None, expires_at=None, **(key_limits or {})).key

    return make


def _wait_for_a_fresh_minute_stretch(seconds: float = 15) -> None:
    """Sleeps until at least ``seconds`` are left before the next UTC minute."""
    second = datetime.now(UTC).second + datetime.now(UTC).microsecond / 1e6
    if 60 - second < seconds + 1:
        time.sleep(60 - second + 0.2)


def _burst(urls: list[str], key: str, body: dict, calls: int = CALLS) -> list[httpx.Response]:
    """``calls`` chat calls at once, spread over the web processes at ``urls``."""

    async def run() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=calls)
        async with httpx.AsyncClient(timeout=60, limits=limits, headers={"Authorization": f"Bearer {key}"}) as client:
            return await asyncio.gather(
                *(client.post(f"{urls[i % len(urls)]}/v1/chat/completions", json=body) for i in range(calls))
            )

    return asyncio.run(run())


def _denials(responses: list[httpx.Response]) -> list[dict]:
    return [response.json()["error"] for response in responses if response.status_code == 429]


@pytest.mark.parametrize("tier", ["project", "key"])
def test_a_rate_limit_admits_exactly_its_requests_across_two_web_processes(
    tier, limited, start_web_process, fake_upstream
):
    key = limited(
        *({"rate_limit_rpm": 10} if tier == "project" else {}, {"rate_limit_rpm": 10} if tier == "key" else {})
    )
    urls = [start_web_process().url, start_web_process().url]
    _wait_for_a_fresh_minute_stretch()
    fake_upstream.forget_requests()
    sent = datetime.now(UTC)
    responses = _burst(urls, key, CHAT)
    answered = datetime.now(UTC)

    assert sorted(response.status_code for response in responses) == [200] * 10 + [429] * 40
    assert fake_upstream.calls("openai.chat") == 10
    next_minute = sent.replace(second=0, microsecond=0).timestamp() + 60
    assert answered.timestamp() < next_minute, "the burst crossed a minute boundary"
    for response in responses:
        if response.status_code == 429:
            retry_after = int(response.headers["Retry-After"])
            assert math.ceil(next_minute - answered.timestamp()) <= retry_after
            assert retry_after <= math.ceil(next_minute - sent.timestamp())
            assert response.headers["x-ratelimit-remaining-requests"] == "0"
        assert response.headers["x-ratelimit-limit-requests"] == "10"
    assert {(error["type"], error["code"], error["scope"]) for error in _denials(responses)} == {
        ("rate_limit_exceeded", "rate_limit_rpm", tier)
    }
    subject = "this project" if tier == "project" else "this api key"
    assert _denials(responses)[0]["message"].startswith(f"Rate limit reached: 10 requests per minute for {subject}.")
    rows = wait_for_logs(CALLS, project__name="limited")
    denied = [row for row in rows if row.status_code == 429]
    assert len(denied) == 40
    assert {(row.prompt_tokens, row.completion_tokens, row.cost_micros) for row in denied} == {(0, 0, 0)}


BUDGETS = {
    "tokens": ("budget_daily_tokens", 10 * CALL_TOKENS, "budget_daily"),
    "usd": ("budget_daily_usd_micros", 10 * CALL_MICROS, "budget_daily_usd"),
}


@pytest.mark.parametrize("unit", BUDGETS)
@pytest.mark.parametrize("tight", ["project", "key"])
def test_a_budget_holds_under_concurrent_calls_and_names_the_tier_that_ran_out(
    unit, tight, limited, start_web_process, fake_upstream
):
    field, budget, code = BUDGETS[unit]
    # Both tiers have the budget; the other tier's is twice as large.
    key = limited(
        {field: budget if tight == "project" else 2 * budget}, {field: budget if tight == "key" else 2 * budget}
    )
    urls = [start_web_process().url, start_web_process().url]
    fake_upstream.forget_requests()
    responses = _burst(urls, key, CHAT)

    passed = sum(response.status_code == 200 for response in responses)
    assert passed in (10, 11)
    assert fake_upstream.calls("openai.chat") == passed
    assert {(error["type"], error["code"], error["scope"]) for error in _denials(responses)} == {
        ("insufficient_quota", code, tight)
    }
    assert len(_denials(responses)) == CALLS - passed
    rows = [row for row in wait_for_logs(CALLS, project__name="limited") if row.status_code == 200]
    assert [(row.prompt_tokens, row.completion_tokens, row.cost_micros) for row in rows] == [
        (PROMPT_WORDS, ANSWER_TOKENS, CALL_MICROS)
    ] * passed
