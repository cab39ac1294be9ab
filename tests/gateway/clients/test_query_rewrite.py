"""A chat's retrieval query under its project's `query_rewrite`, against the fake upstream: what
the store search embeds, the condensation request the chat model receives, its price on the
row, its fallbacks and its place in the call's limits."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gateway.clients.followups import CONDENSE_INSTRUCTION
from tests.fakes.upstream import CHAT_ANSWER
from tests.helpers import wait_for_logs

FIRST = "Tell me about Project Falcon."
FOLLOW_UP = "What is its launch code?"
CONVERSATION = [
    {"role": "user", "content": FIRST},
    {"role": "assistant", "content": "Project Falcon is the launch programme."},
    {"role": "user", "content": FOLLOW_UP},
]
CONDENSED = "What is the launch code of Project Falcon?"
RATE = {"input_per_mtok": Decimal("2"), "output_per_mtok": Decimal("2")}


@pytest.fixture
def rewriting(project):
    """``rewriting(mode)``: the project's `query_rewrite` set to ``mode``."""
    from gateway.clients.services import project_update

    def set_mode(mode: str):
        return project_update(project=project, query_rewrite=mode)

    return set_mode


@pytest.fixture
def priced(db):
    """Free embeddings and a chat at 2 $ a million tokens either way: a row's cost is 2 µ$ a token."""
    from gateway.connections.models import ModelPrice

    for model, rates in (("text-embedding-3-small", {k: Decimal(0) for k in RATE}), ("gpt-4o-mini", RATE)):
        ModelPrice.objects.update_or_create(provider_type="openai", model=model, defaults=rates)


def chat(client, messages=CONVERSATION, **body):
    response = client.post("/chat/completions", json={"model": "m", "messages": messages, **body})
    assert response.status_code == 200, response.text
    return response


def searched(fake_upstream) -> str:
    """The query the store's search embedded last."""
    return fake_upstream.inputs("openai.embeddings")[-1]


def test_off_searches_the_last_user_message_and_asks_no_one(v1, project_key, project, fake_upstream):
    chat(v1(project_key))
    assert searched(fake_upstream) == FOLLOW_UP
    assert fake_upstream.calls("openai.chat") == 1
    [row] = wait_for_logs(1, project=project)
    assert (row.query_rewrite_tokens, row.query_rewrite_reason) == (0, "")


def test_last_turns_searches_the_rules_query(v1, project_key, project, fake_upstream, rewriting):
    rewriting("last_turns")
    response = chat(v1(project_key))
    assert searched(fake_upstream) == f"{FIRST}\n{FOLLOW_UP}"
    assert response.headers["x-ragmux-rag-hits"] == "1"
    assert fake_upstream.calls("openai.chat") == 1


def test_llm_searches_the_chat_models_standalone_question_priced_on_the_row(
    v1, project_key, project, fake_upstream, rewriting, priced, settings
):
    rewriting("llm")
    fake_upstream.configure("openai.chat", answer=f'"{CONDENSED}"')
    response = chat(v1(project_key))

    condensation, answered = fake_upstream.requests_to("openai.chat")
    sent = condensation.json()
    assert sent["messages"][0] == {"role": "system", "content": CONDENSE_INSTRUCTION}
    assert (
        f"User: {FIRST}\nAssistant: Project Falcon is the launch programme.\nUser: {FOLLOW_UP}"
        in (sent["messages"][1]["content"])
    )
    assert (sent["temperature"], sent["max_completion_tokens"]) == (0, settings.QUERY_REWRITE_MAX_TOKENS)
    assert searched(fake_upstream) == CONDENSED
    assert response.headers["x-ragmux-rag-hits"] == "1"
    assert answered.json()["messages"][-1] == {"role": "user", "content": FOLLOW_UP}

    [row] = wait_for_logs(1, project=project)
    words = sum(len(str(m["content"]).split()) for m in sent["messages"])
    assert row.query_rewrite_tokens == words + len(CHAT_ANSWER.split())  # the fake's usage
    assert (row.query_rewrite_reason, row.tokens_estimated) == ("", False)
    chat_tokens = row.prompt_tokens + row.completion_tokens
    assert (row.cost_micros, row.cost_source) == (2 * (chat_tokens + row.query_rewrite_tokens), "price_table")


def test_llm_leaves_a_first_question_alone(v1, project_key, project, fake_upstream, rewriting):
    rewriting("llm")
    chat(v1(project_key), messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": FIRST}])
    assert searched(fake_upstream) == FIRST
    assert fake_upstream.calls("openai.chat") == 1


@pytest.mark.parametrize(
    ("knobs", "reason"),
    [
        ({"status": 400, "times": 1}, "the chat model failed: "),
        ({"answer": "   "}, "the chat model's answer was empty"),
        ({"answer": "launch code " * 200}, "the chat model's answer was too long for a search query"),
    ],
)
def test_a_failed_condensation_searches_the_last_message_and_says_why(
    v1, project_key, project, fake_upstream, rewriting, knobs, reason
):
    rewriting("llm")
    fake_upstream.configure("openai.chat", **knobs)
    response = chat(v1(project_key))
    assert response.json()["choices"][0]["message"]["content"]
    assert searched(fake_upstream) == FOLLOW_UP
    assert response.headers["x-ragmux-rag-hits"] == "1"
    [row] = wait_for_logs(1, project=project)
    assert row.status_code == 200 and row.query_rewrite_reason.startswith(reason)
    assert row.rag_skipped_reason == ""


def test_a_slow_chat_model_is_given_up_on_and_charged_its_prompts_estimate(
    v1, api, project_key, project, fake_upstream, rewriting, settings
):
    rewriting("llm")
    settings.QUERY_REWRITE_TIMEOUT = 0.2
    fake_upstream.configure("openai.chat", latency=0.5)
    response = chat(v1(project_key))
    assert response.json()["choices"][0]["message"]["content"] == CHAT_ANSWER
    assert searched(fake_upstream) == FOLLOW_UP
    [row] = wait_for_logs(1, project=project)
    assert row.query_rewrite_reason == "the chat model took longer than QUERY_REWRITE_TIMEOUT (0.2s)"
    assert row.query_rewrite_tokens > 0 and row.tokens_estimated
    [listed] = api("viewer").get("/admin/api/request-logs").json()["data"]
    assert (listed["query_rewrite_reason"], listed["query_rewrite_tokens"]) == (
        row.query_rewrite_reason,
        row.query_rewrite_tokens,
    )


def test_the_condensation_is_reserved_with_the_call(v1, project_key, project, fake_upstream, rewriting, settings):
    """A minute's token limit the chat fits in alone refuses it once its condensation may add
    QUERY_REWRITE_MAX_TOKENS, before any upstream is asked."""
    from gateway.clients.models import Project

    Project.objects.filter(pk=project.pk).update(rate_limit_tpm=400)
    settings.QUERY_REWRITE_MAX_TOKENS = 1000
    assert chat(v1(project_key), max_tokens=10).status_code == 200
    rewriting("llm")
    fake_upstream.forget_requests()
    refused = v1(project_key).post("/chat/completions", json={"model": "m", "messages": CONVERSATION, "max_tokens": 10})
    assert refused.status_code == 429, refused.text
    assert fake_upstream.calls("openai.chat") == 0


def test_the_condensation_settles_once_with_the_call(v1, project_key, project, fake_upstream, rewriting):
    from gateway.clients.models import Project, UsageCounter

    rewriting("llm")
    Project.objects.filter(pk=project.pk).update(budget_daily_tokens=10**9)
    chat(v1(project_key))
    [row] = wait_for_logs(1, project=project)
    counted = UsageCounter.objects.get(tier="project", owner_id=project.pk, period="day")
    assert row.query_rewrite_tokens > 0
    assert counted.prompt_tokens == row.prompt_tokens + row.embedding_tokens + row.query_rewrite_tokens
    assert counted.completion_tokens == row.completion_tokens
    assert (counted.reserved_tokens, counted.reserved_micros) == (0, 0)


def test_a_responses_continuation_follows_the_projects_rewrite(v1, project_key, fake_upstream, rewriting):
    rewriting("last_turns")
    client = v1(project_key)
    first = client.post("/responses", json={"model": "m", "input": FIRST})
    assert first.status_code == 200, first.text
    follow_up = client.post(
        "/responses", json={"model": "m", "input": FOLLOW_UP, "previous_response_id": first.json()["id"]}
    )
    assert follow_up.status_code == 200, follow_up.text
    assert searched(fake_upstream) == f"{FIRST}\n{FOLLOW_UP}"


def test_the_condensation_fails_over_along_the_chats_route(
    v1, project, project_key, fake_upstream, upstreams, rewriting, settings, fresh_cooldowns
):
    from tests.gateway.clients.test_routed_chat import make_route

    settings.UPSTREAM_FIRST_BYTE_TIMEOUT = 30
    rewriting("llm")
    route = make_route(upstreams)
    project.allowed_routes.add(route)
    upstreams[0].configure("openai.chat", status=500)
    upstreams[1].configure("openai.chat", answer=CONDENSED)

    chat(v1(project_key), model=route.name)

    condensation, answered = upstreams[1].requests_to("openai.chat")
    assert condensation.json()["messages"][0]["content"] == CONDENSE_INSTRUCTION
    assert answered.json()["messages"][-1]["content"] == FOLLOW_UP
    assert searched(fake_upstream) == CONDENSED
    assert fake_upstream.calls("openai.chat") == 0  # the project's own connection was not asked
    [row] = wait_for_logs(1, project=project)
    assert (row.route_name, row.target, row.query_rewrite_reason) == (route.name, f"{route.name}-target-1", "")
    assert [attempt["outcome"] for attempt in row.attempts] == ["http_5xx", "ok"]  # the chat's own attempts


def test_a_chosen_connection_condenses_priced_at_its_own_rate(
    v1, api, project, project_key, fake_upstream, upstreams, rewriting, priced
):
    from gateway.connections.models import ModelPrice
    from gateway.connections.services import connection_create

    rewriter = connection_create(
        name="small-chat",
        provider_type="custom_openai",
        base_url=f"{upstreams[0].url}/v1",
        model_name="tiny-model",
        dimensions=None,
        api_key="sk-fake-chat-key-0000000000",
    )
    ModelPrice.objects.create(
        provider_type="custom_openai", model="tiny-model", input_per_mtok=Decimal(1), output_per_mtok=Decimal(1)
    )
    patched = api("admin").patch(
        f"/admin/api/projects/{project.pk}", json={"query_rewrite": "llm", "query_rewrite_connection_id": rewriter.pk}
    )
    assert patched.json()["query_rewrite_connection_id"] == rewriter.pk
    upstreams[0].configure("openai.chat", answer=CONDENSED)

    chat(v1(project_key))

    [condensation] = upstreams[0].requests_to("openai.chat")
    assert condensation.json()["max_tokens"] == 100 and condensation.json()["model"] == "tiny-model"
    assert fake_upstream.calls("openai.chat") == 1  # the chat alone
    assert searched(fake_upstream) == CONDENSED
    [row] = wait_for_logs(1, project=project)
    assert row.model == "gpt-4o-mini"
    chat_tokens = row.prompt_tokens + row.completion_tokens
    assert row.cost_micros == 2 * chat_tokens + row.query_rewrite_tokens  # 1 µ$ a token for the small model


def test_the_chosen_connection_must_chat(api, project, local_connection):
    from gateway.clients.models import Project

    url = f"/admin/api/projects/{project.pk}"
    for wrong in (local_connection.pk, 999_999, 2**70, "x"):
        refused = api("admin").patch(url, json={"query_rewrite_connection_id": wrong})
        assert refused.status_code == 400 and "query_rewrite_connection_id" in refused.json()["error"]["fields"], wrong
    assert Project.objects.get(pk=project.pk).query_rewrite_connection_id is None
