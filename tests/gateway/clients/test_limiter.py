"""Rate limits and budgets enforced on `/v1`, over real HTTP: exact under concurrency across two
production web processes, the 429s and their headers, and what a denied call costs (nothing)."""

from __future__ import annotations

import asyncio
import math
import re
import time
from datetime import UTC, datetime
from decimal import Decimal

import httpx
import pytest

from tests.fakes.upstream import CHAT_ANSWER
from tests.helpers import scrape, wait_for_logs

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
    from gateway.connections.price_services import price_create
    from gateway.connections.services import connection_create

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
    # A retrieval past SEARCH_TIMEOUT answers without context, a call the budget rightly lets
    # through: on a loaded machine that is not what this test is about.
    patient = {"SEARCH_TIMEOUT": "120"}
    urls = [start_web_process(patient).url, start_web_process(patient).url]
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
    denied_counts = [
        _metric(url, f'ragmux_limits_denied_total{{code="rate_limit_rpm",scope="{tier}"}}') for url in urls
    ]
    assert sum(denied_counts) == 40
    subject = "this project" if tier == "project" else "this api key"
    assert _denials(responses)[0]["message"].startswith(f"Rate limit reached: 10 requests per minute for {subject}.")
    rows = wait_for_logs(CALLS, project__name="limited")
    denied = [row for row in rows if row.status_code == 429]
    assert len(denied) == 40
    assert {(row.prompt_tokens, row.completion_tokens, row.cost_micros) for row in denied} == {(0, 0, 0)}
    # Once every admitted call has settled, the minute counts the 10 calls and no refused one.
    owner = denied[0].project_id if tier == "project" else denied[0].key_id
    deadline = time.monotonic() + 5
    while _counters(tier, owner)["minute"][4] and time.monotonic() < deadline:
        time.sleep(0.05)
    requests, prompt, completion, _, reserved_tokens, _ = _counters(tier, owner)["minute"]
    assert (requests, prompt, completion, reserved_tokens) == (10, 10 * PROMPT_WORDS, 10 * ANSWER_TOKENS, 0)


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
    # A retrieval past SEARCH_TIMEOUT answers without context, a call the budget rightly lets
    # through: on a loaded machine that is not what this test is about.
    patient = {"SEARCH_TIMEOUT": "120"}
    urls = [start_web_process(patient).url, start_web_process(patient).url]
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


def _counters(tier: str, owner_id: int) -> dict[str, tuple]:
    """Each window's (requests, prompt, completion, cost, reserved tokens, reserved micro-dollars)."""
    from gateway.clients.models import UsageCounter

    return {
        row.period: (
            row.requests,
            row.prompt_tokens,
            row.completion_tokens,
            row.cost_micros,
            row.reserved_tokens,
            row.reserved_micros,
        )
        for row in UsageCounter.objects.filter(tier=tier, owner_id=owner_id)
    }


def _settled(project, count: int) -> None:
    from gateway.clients.ledger import flush

    wait_for_logs(count, project=project)
    assert flush(5)


def test_a_denied_call_makes_no_upstream_or_embedding_call_and_costs_nothing(v1, project, project_key, fake_upstream):
    from gateway.clients.services import project_update

    project_update(project=project, rate_limit_rpm=1)
    fake_upstream.forget_requests()  # the store's ingestion
    client = v1(project_key)
    assert client.post("/chat/completions", json=CHAT).status_code == 200
    spent = (fake_upstream.calls("openai.embeddings"), fake_upstream.calls("openai.chat"))
    assert spent == (1, 1)
    denied = client.post("/chat/completions", json={**CHAT, "stream": True})
    assert denied.status_code == 429
    assert (fake_upstream.calls("openai.embeddings"), fake_upstream.calls("openai.chat")) == spent
    [_, row] = wait_for_logs(2, project=project)
    assert (row.status_code, row.prompt_tokens, row.completion_tokens, row.embedding_tokens, row.cost_micros) == (
        429,
        0,
        0,
        0,
        0,
    )
    assert row.model == project.chat_connection.model_name


def test_every_v1_answer_but_the_model_listing_carries_its_limits_headers(
    v1, project, project_key, settings, fake_connection
):
    from gateway.clients.services import project_update

    settings.V1_CORS_ORIGINS = ["https://app.example"]
    project_update(
        project=project,
        embedding_connection_id=fake_connection.id,
        rate_limit_rpm=100,
        rate_limit_tpm=1_000_000,
        budget_daily_tokens=1_000_000,
        budget_monthly_tokens=5_000_000,
        budget_daily_usd_micros=1_000_000,
        budget_monthly_usd_micros=5_000_000,
    )
    client = v1(project_key)
    origin = {"Origin": "https://app.example"}
    answers = [
        client.post("/chat/completions", json=CHAT, headers=origin),
        client.post("/embeddings", json={"input": ["falcon"]}, headers=origin),
        client.post("/retrieve", json={"query": "launch code"}, headers=origin),
    ]
    for answer in answers:
        assert answer.status_code == 200, answer.text
        exposed = {name.strip() for name in answer.headers["access-control-expose-headers"].split(",")}
        for name in (
            "x-ratelimit-limit-requests",
            "x-ratelimit-remaining-requests",
            "x-ratelimit-reset-requests",
            "x-ratelimit-limit-tokens",
            "x-ratelimit-remaining-tokens",
            "x-ragmux-budget-daily-remaining",
            "x-ragmux-budget-monthly-remaining",
            "x-ragmux-budget-daily-usd-remaining",
            "x-ragmux-budget-monthly-usd-remaining",
        ):
            assert name in answer.headers
            assert name in exposed
        assert "retry-after" in exposed
    assert [int(answer.headers["x-ratelimit-remaining-requests"]) for answer in answers] == [99, 98, 97]
    listing = client.get("/models")
    assert not [name for name in listing.headers if name.startswith(("x-ratelimit", "x-ragmux-budget"))]


def test_a_dollar_budget_refuses_a_model_without_a_price(v1, limited, fake_upstream):
    from gateway.clients.models import GatewayKey
    from gateway.connections.models import ModelPrice

    key = limited({"budget_monthly_usd_micros": 1_000_000})
    ModelPrice.objects.filter(model="budget-model").delete()
    refused = v1(key).post("/chat/completions", json=CHAT)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "unpriced_model"
    assert "'budget-model'" in refused.json()["error"]["message"]
    assert fake_upstream.calls("openai.chat") == 0
    # Without a dollar budget the same model is answered (and logged as unpriced).
    GatewayKey.objects.update(budget_monthly_usd_micros=0)
    from gateway.clients.models import Project

    Project.objects.update(budget_monthly_usd_micros=0)
    assert v1(key).post("/chat/completions", json=CHAT).status_code == 200


# How a stream ends, and the status its row says.
STREAM_ENDINGS = {"completed": 200, "client left": 499, "STREAM_MAX_DURATION": 504, "UPSTREAM_IDLE_TIMEOUT": 504}


@pytest.mark.parametrize("ending", STREAM_ENDINGS)
def test_a_stream_settles_to_its_usage_when_it_ends(v1, limited, fake_upstream, settings, ending):
    from gateway.clients.models import Project, RequestLog

    key = limited({"budget_daily_tokens": 1_000_000}, {"rate_limit_tpm": 1_000_000})
    project = Project.objects.get(name="limited")
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    if ending == "completed":
        assert "[DONE]" in v1(key).post("/chat/completions", json=body).text
    elif ending != "client left":
        # Ended by the gateway's bound mid-stream: an error frame, then [DONE].
        setattr(settings, ending, 1)
        fake_upstream.configure("openai.chat", chunk_interval=0.2, stall_after=8)
        assert '"type": "timeout"' in v1(key).post("/chat/completions", json=body).text
    else:
        fake_upstream.configure("openai.chat", stall_after=2)
        with v1(key).stream("POST", "/chat/completions", json=body) as answer:
            next(answer.iter_bytes())
        assert fake_upstream.wait_for_disconnects(1)
    _settled(project, 1)
    row = RequestLog.objects.get(project=project)
    assert row.status_code == STREAM_ENDINGS[ending]
    used = (row.prompt_tokens, row.completion_tokens, row.cost_micros)
    assert row.prompt_tokens > 0
    for tier, owner in (("project", project.pk), ("key", row.key_id)):
        counters = _counters(tier, owner)
        assert set(counters) == {"minute", "day", "month"}
        # The estimate reserved at admission has given way to what the row says was spent.
        assert set(counters.values()) == {(1, *used, 0, 0)}


def _metric(url: str, sample: str) -> float:
    """The value of one sample (a name and its labels, as /metrics writes them) at ``url``."""
    text = scrape(url)
    match = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def _unchecked_calls(asgi_url: str) -> float:
    return _metric(asgi_url, "ragmux_limits_unchecked_total")


@pytest.mark.parametrize(
    ("limits", "status"),
    [({"rate_limit_rpm": 1, "rate_limit_tpm": 5}, 200), ({"rate_limit_rpm": 1, "budget_daily_tokens": 10**6}, 503)],
    ids=["minute limits fail open", "budgets never skipped"],
)
def test_counters_that_cannot_be_reached(v1, asgi_url, limited, fake_upstream, limits, status, metrics_on):
    from django.db import connection

    key = limited(limits)
    unchecked_before = _unchecked_calls(asgi_url)
    # The name alone (it is the only function of that name): the admission statement cannot run.
    with connection.cursor() as cursor:
        cursor.execute("ALTER FUNCTION ragmux_usage_admit RENAME TO ragmux_usage_admit_away")
    try:
        answers = [v1(key).post("/chat/completions", json=CHAT) for _ in range(2)]
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER FUNCTION ragmux_usage_admit_away RENAME TO ragmux_usage_admit")
    assert [answer.status_code for answer in answers] == [status, status]
    assert fake_upstream.calls("openai.chat") == (2 if status == 200 else 0)
    if status == 503:
        assert answers[0].json()["error"]["code"] == "limit_check_failed"
    # Each call let through unchecked is counted.
    assert _unchecked_calls(asgi_url) == unchecked_before + (2 if status == 200 else 0)


def test_calls_waiting_in_one_process_are_admitted_in_batches_with_the_verdicts_of_one_at_a_time(limited):
    """20 calls of one project at once on one event loop (they wait together, and are admitted
    together) get the verdicts they would have had one at a time: the first 5 (the project's
    rpm) get in, each with its own counters and reservation."""
    from gateway.clients import limiter
    from gateway.clients.ledger import Call, Spend
    from gateway.clients.models import GatewayKey
    from ragmux.core import asyncdb
    from ragmux.core.errors import RateLimited

    limited({"rate_limit_rpm": 5, "budget_daily_usd_micros": 10**9})
    key = GatewayKey.objects.select_related("project").get(project__name="limited")
    spend = Spend("openai", "budget-model", PROMPT_WORDS, ANSWER_TOKENS)

    async def burst() -> list[Call | BaseException]:
        calls = [Call(project=key.project, key=key, endpoint="chat") for _ in range(20)]
        try:
            verdicts = await asyncio.gather(
                *(limiter.admit(call, tokens=CALL_TOKENS, spends=[spend]) for call in calls), return_exceptions=True
            )
        finally:
            await asyncdb.close()
        return [call if verdict is None else verdict for call, verdict in zip(calls, verdicts, strict=True)]

    _wait_for_a_fresh_minute_stretch(5)
    outcomes = asyncio.run(burst())

    admitted = [outcome for outcome in outcomes if isinstance(outcome, Call)]
    assert outcomes[:5] == admitted
    assert all(isinstance(outcome, RateLimited) and outcome.code == "rate_limit_rpm" for outcome in outcomes[5:])
    assert [call.limit_headers["x-ratelimit-remaining-requests"] for call in admitted] == ["4", "3", "2", "1", "0"]
    assert {(call.admission.reserved_tokens, call.admission.reserved_micros) for call in admitted} == {
        (CALL_TOKENS, CALL_MICROS)
    }
    requests, _, _, _, reserved_tokens, reserved_micros = _counters("project", key.project_id)["minute"]
    assert (requests, reserved_tokens, reserved_micros) == (5, 5 * CALL_TOKENS, 5 * CALL_MICROS)


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("value", [2**63, 2**64 + 5, 2**31])
def test_a_completion_larger_than_any_provider_takes_is_a_400_naming_its_field(
    v1, limited, fake_upstream, field, value
):
    key = limited({"budget_daily_tokens": 1_000_000, "budget_daily_usd": "5.00"})

    refused = v1(key).post("/chat/completions", json={**CHAT, field: value})

    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["code"] == "invalid_request" and field in error["message"]
    assert fake_upstream.calls() == 0
    assert v1(key).post("/chat/completions", json=CHAT).status_code == 200


def test_a_reservation_is_clamped_to_what_the_counters_hold():
    from gateway.clients.usage import MAX_RESERVATION, Admission, Claim

    claim = Claim(admission=Admission(project_id=1, key_id=1, windows={}), checks=[], tokens=2**70, micros=0)
    claim.micros = 2**64
    assert (claim.tokens, claim.micros) == (MAX_RESERVATION, MAX_RESERVATION)


# A handbook whose three sections each fill a chunk: a RAG call's prompt is mostly its context.
RAG_SECTION_WORDS = 600
RAG_CALLS = 25


@pytest.fixture
def rag_limited(priced_connection, fake_connection, ingest_now):
    """``rag_limited(project_limits, key_limits)`` is a key (plaintext) of a new RAG project whose
    store puts about 2,000 tokens of context in each chat, the project and the key each with
    those limits; ``rag_limited.project`` is the project."""
    from gateway.clients.services import key_create, project_create
    from ingestion.services import IncomingFile, document_upload
    from stores.services import store_create

    store = store_create(name="manuals", values={"embedding_connection_id": fake_connection.id, "top_k": 3})
    sections = "\n\n".join(
        f"## Part {part}\n\n" + " ".join(f"w{part}{n % 100:02d}" for n in range(RAG_SECTION_WORDS)) for part in "abc"
    )
    document = IncomingFile("manual.md", f"# Manual\n\n{sections}".encode())
    assert document_upload(store=store, files=[document]).refusal is None
    ingest_now()

    def make(project_limits: dict | None = None, key_limits: dict | None = None) -> str:
        make.project = project_create(
            name="rag-limited",
            chat_connection_id=priced_connection.id,
            embedding_connection_id=None,
            store_id=store.id,
            system_prompt="",
            **(project_limits or {}),
        )
        return key_create(project=make.project, name="k", scopes=None, expires_at=None, **(key_limits or {})).key

    return make


def _spent(rows) -> tuple[int, int]:
    """The tokens (every kind) and micro-dollars the rows spent."""
    tokens = sum(row.prompt_tokens + row.completion_tokens + row.embedding_tokens + row.rerank_tokens for row in rows)
    return tokens, sum(row.cost_micros for row in rows)


@pytest.mark.parametrize("unit", ["tokens", "usd"])
@pytest.mark.parametrize("tight", ["project", "key"])
def test_a_budget_counts_a_rag_calls_retrieved_context_before_the_upstream_is_asked(
    unit, tight, rag_limited, start_web_process, fake_upstream, v1
):
    from gateway.clients.models import Project, RequestLog

    # One call alone, unlimited: what a RAG call really costs.
    key = rag_limited()
    assert v1(key).post("/chat/completions", json=CHAT).status_code == 200
    call_tokens, call_micros = _spent(wait_for_logs(1, project=rag_limited.project))
    assert call_tokens > 20 * CALL_TOKENS, "the context must dominate the call"
    Project.objects.filter(pk=rag_limited.project.pk).update(name="measured")

    # A budget that fits 5 such calls, on the tight tier; the other tier's is twice as large.
    field, budget = (
        ("budget_daily_tokens", 5 * call_tokens)
        if unit == "tokens"
        else (
            "budget_daily_usd_micros",
            5 * call_micros,
        )
    )
    key = rag_limited(
        {field: budget if tight == "project" else 2 * budget}, {field: budget if tight == "key" else 2 * budget}
    )
    # A retrieval past SEARCH_TIMEOUT answers without context, a call the budget rightly lets
    # through: on a loaded machine that is not what this test is about.
    patient = {"SEARCH_TIMEOUT": "120"}
    urls = [start_web_process(patient).url, start_web_process(patient).url]
    fake_upstream.forget_requests()
    responses = _burst(urls, key, CHAT, calls=RAG_CALLS)

    passed = sum(response.status_code == 200 for response in responses)
    assert fake_upstream.calls("openai.chat") == passed, "a refused call sends nothing upstream"
    code = "budget_daily" if unit == "tokens" else "budget_daily_usd"
    assert {(error["code"], error["scope"]) for error in _denials(responses)} == {(code, tight)}
    rows = wait_for_logs(RAG_CALLS, project__name="rag-limited")
    assert len(rows) == RAG_CALLS
    # A call whose retrieval failed (the fake upstream drops some of 25 connections at once, or a
    # search past SEARCH_TIMEOUT) answers without context: a cheap call the budget rightly admits.
    grounded = [row for row in rows if row.status_code == 200 and not row.rag_skipped_reason]
    assert 1 <= len(grounded) <= 6
    spent_tokens, spent_micros = _spent(rows)
    assert spent_tokens <= 6 * call_tokens
    assert spent_micros <= 6 * call_micros
    # A call refused after retrieval still counts its query's embedding, and nothing else.
    refused = [row for row in rows if row.status_code == 429]
    assert {(row.prompt_tokens, row.completion_tokens) for row in refused} == {(0, 0)}
    assert any(row.embedding_tokens > 0 for row in refused)
    assert RequestLog.objects.filter(project__name="measured").count() == 1


# A call that reserves a whole budget of 1,000 tokens on its own (its estimate: its prompt and a
# 990-token completion) but spends CALL_TOKENS.
WHOLE_BUDGET = {**CHAT, "max_tokens": 990}


def _chat_in(process, key: str, body: dict) -> httpx.Response:
    """A chat call sent to another web process."""
    return httpx.post(
        f"{process.url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30
    )


def test_a_calls_reservation_is_released_when_its_answer_ends(v1, limited):
    key = limited({"budget_daily_tokens": 1000})
    client = v1(key)
    # Each call reserves 1,010 tokens and spends 29: back to back, each finds the one before
    # settled to its spend, not still holding its reservation until its row is written.
    answers = [client.post("/chat/completions", json=WHOLE_BUDGET) for _ in range(5)]
    assert [answer.status_code for answer in answers] == [200] * 5, answers[-1].text


def test_a_refusal_caused_by_calls_in_flight_says_so_and_asks_for_a_retry_in_seconds(
    v1, limited, second_web_process, fake_upstream
):
    key = limited({"budget_daily_tokens": 1000})
    fake_upstream.configure("openai.chat", stall_after=2)
    with v1(key).stream("POST", "/chat/completions", json={**WHOLE_BUDGET, "stream": True}) as held:
        chunks = held.iter_bytes()
        next(chunks)
        refused = _chat_in(second_web_process, key, CHAT)
    assert refused.status_code == 429
    assert refused.headers["Retry-After"] == "1"
    assert refused.json()["error"]["message"] == (
        "Daily token budget of this project is held by calls in progress. 0 tokens used and 1010 tokens "
        "reserved by calls not finished yet, of 1000 tokens; a reservation is released when its call ends. "
        "Retry after 1 seconds."
    )


def test_a_call_larger_than_the_tokens_per_minute_is_admitted_in_a_minute_no_other_call_uses(
    v1, limited, second_web_process
):
    key = limited({"rate_limit_tpm": 1000})
    _wait_for_a_fresh_minute_stretch()
    # Without max_tokens the call is estimated at its prompt and LIMIT_DEFAULT_COMPLETION_TOKENS (1,000).
    unbounded = {key: value for key, value in CHAT.items() if key != "max_tokens"}
    first = v1(key).post("/chat/completions", json=unbounded)
    assert first.status_code == 200, first.text
    sent = datetime.now(UTC)
    second = _chat_in(second_web_process, key, unbounded)
    assert second.status_code == 429
    # True: the next minute has room for it.
    next_minute = sent.replace(second=0, microsecond=0).timestamp() + 60
    assert int(second.headers["Retry-After"]) <= math.ceil(next_minute - sent.timestamp())
    assert second.json()["error"]["message"].startswith(
        "Rate limit reached: 1000 tokens per minute for this project; this call's estimate is larger than "
        "the limit, so it is admitted only in a minute no other call uses."
    )
    # A call that fits still gets in beside the first.
    assert v1(key).post("/chat/completions", json=CHAT).status_code == 200


def test_a_dollar_budgets_refusal_shows_amounts_to_the_micro_dollar(v1, limited, fake_upstream):
    from gateway.clients.models import Project

    key = limited({"budget_daily_usd_micros": CALL_MICROS - 1})
    assert v1(key).post("/chat/completions", json=CHAT).status_code == 200
    _settled(Project.objects.get(name="limited"), 1)
    refused = v1(key).post("/chat/completions", json=CHAT)
    assert refused.status_code == 429
    assert CALL_MICROS == 38
    assert refused.json()["error"]["message"].startswith(
        "Daily dollar budget exhausted ($0.000038 of $0.000037 spent)."
    )
