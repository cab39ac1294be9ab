"""`file_search` in `/v1/responses`, answered by us, through the official `openai` client: the
vector stores it names ground the answer (each with its own settings, a filter and the key's
document scope applied), the output says what was searched (`file_search_call`, its results when
`include` asks) and which files the answer cited (`file_citation`), whole and streamed, and the
call is admitted, counted and priced as a chat."""

from __future__ import annotations

import openai
import pytest

from gateway.clients.services import key_create, project_create, project_update
from gateway.clients.vector_store_ids import document_file_id
from gateway.clients.vector_store_services import (
    Attachment,
    file_create,
    given_vector_store,
    vector_store_create,
    vector_store_file_attach,
)
from retrieval.context import CONTEXT_HEADER
from retrieval.filters import parse_filter
from stores.models import Document
from tests.gateway.clients.test_key_document_scopes import ACME, shared_store  # noqa: F401 (a fixture)
from tests.gateway.clients.test_responses_events import SEARCH_OPENING
from tests.gateway.clients.test_v1_responses import sdk_for
from tests.helpers import PLANTED_FACT, wait_for_logs

QUESTION = "Who staffs the Project Falcon launch?"
CITING = "The launch is staffed by the support team [1]."
TEAM_FILES = {
    "support.md": ("# Support\n\nThe Project Falcon launch is staffed by the support team on call.", "support"),
    "people.md": ("# People\n\nThe Project Falcon launch staff get a day off after the launch.", "hr"),
}


@pytest.fixture
def sdk(asgi_url, v1, project_key):
    # `v1` for its teardown, which waits for the request log rows.
    client = sdk_for(asgi_url, project_key)
    yield client
    client.close()


@pytest.fixture
def handbook_store(project):
    """The project's own store (the handbook), as the vector store it appears as."""
    return given_vector_store(project=project)


@pytest.fixture
def team_store(project, ingest_now, fake_upstream):
    """A vector store the project made, holding two uploaded files with a `team` attribute."""
    vector_store = vector_store_create(project=project, name="teams", metadata={}, expires_after_days=None, chunking={})
    for filename, (text, team) in TEAM_FILES.items():
        uploaded = file_create(project=project, filename=filename, purpose="assistants", data=text.encode())
        vector_store_file_attach(vector_store=vector_store, attachment=Attachment(uploaded, {"team": team}))
    ingest_now()
    fake_upstream.forget_requests()
    return vector_store


def file_ids(vector_store) -> dict[str, str]:
    """File name → the id of the file it was uploaded as."""
    return {attached.file.filename: attached.file.id for attached in vector_store.files.select_related("file")}


def searching(*vector_stores, **options) -> list[dict]:
    return [{"type": "file_search", "vector_store_ids": [store.id for store in vector_stores], **options}]


def sent_context(fake_upstream) -> str:
    return fake_upstream.requests_to("openai.chat")[-1].json()["messages"][0]["content"]


def test_the_answer_cites_the_uploaded_file_it_was_grounded_on(sdk, fake_upstream, team_store, project):
    fake_upstream.configure("openai.chat", answer=CITING)
    response = sdk.responses.create(
        model="m", input=QUESTION, tools=searching(team_store), include=["file_search_call.results"]
    )

    search, message = response.output
    assert (search.type, search.status, search.queries) == ("file_search_call", "completed", [QUESTION])
    assert search.id.startswith("fs_")
    first = search.results[0]
    assert first.file_id in file_ids(team_store).values()  # a file of /v1/files, not a document
    [citation] = message.content[0].annotations
    assert (citation.type, citation.file_id, citation.filename) == ("file_citation", first.file_id, first.filename)
    assert citation.index == CITING.index("[1]") and response.output_text == CITING
    context = sent_context(fake_upstream)
    assert context.startswith(CONTEXT_HEADER) and f"[1] ({first.filename}" in context
    assert PLANTED_FACT not in context  # the project's own store was not searched
    [row] = wait_for_logs(1, project=project)
    assert (row.endpoint, row.status_code, row.rag_hits) == ("responses", 200, len(search.results))
    assert [source["filename"] for source in row.sources] == [result.filename for result in search.results]


def test_results_only_when_include_asks_and_then_whole(sdk, team_store):
    bare = sdk.responses.create(model="m", input=QUESTION, tools=searching(team_store))
    assert bare.output[0].results is None

    response = sdk.responses.create(
        model="m", input=QUESTION, tools=searching(team_store), include=["file_search_call.results"]
    )
    results = response.output[0].results
    assert {result.filename for result in results} == set(TEAM_FILES)
    ids = file_ids(team_store)
    for result in results:
        text, team = TEAM_FILES[result.filename]
        assert result.file_id == ids[result.filename] and result.attributes == {"team": team}
        assert result.text in text and 0 <= result.score <= 1


def test_a_filter_narrows_the_search(sdk, fake_upstream, team_store):
    hr = {"type": "eq", "key": "team", "value": "hr"}
    response = sdk.responses.create(
        model="m", input=QUESTION, tools=searching(team_store, filters=hr), include=["file_search_call.results"]
    )
    assert [result.filename for result in response.output[0].results] == ["people.md"]
    assert "support team on call" not in sent_context(fake_upstream)


def test_max_num_results_bounds_the_passages(sdk, fake_upstream, team_store):
    response = sdk.responses.create(
        model="m", input=QUESTION, tools=searching(team_store, max_num_results=1), include=["file_search_call.results"]
    )
    assert len(response.output[0].results) == 1
    assert sent_context(fake_upstream).count("\n[") == 1


def test_two_vector_stores_are_searched_and_their_hits_interleaved(sdk, fake_upstream, team_store, handbook_store):
    fake_upstream.configure("openai.chat", answer="Both say so [1][2].")
    response = sdk.responses.create(
        model="m",
        input="What is the Project Falcon launch code and who staffs the launch?",
        tools=searching(team_store, handbook_store),
        include=["file_search_call.results"],
    )
    results = response.output[0].results
    handbook = Document.objects.get(store_id=handbook_store.store_id)
    # Each store's first, in the order the stores were named, then each store's second.
    assert results[1].file_id == document_file_id(handbook.pk) and results[1].filename == "handbook.md"
    assert results[0].filename in TEAM_FILES and results[2].filename in TEAM_FILES
    annotations = response.output[1].content[0].annotations
    assert [annotation.file_id for annotation in annotations] == [results[0].file_id, results[1].file_id]
    context = sent_context(fake_upstream)
    assert PLANTED_FACT in context and "[3] (" in context


def test_another_projects_vector_store_is_not_found_and_nothing_is_asked(
    asgi_url, v1, sdk, fake_upstream, team_store, chat_connection, fake_connection
):
    other = project_create(
        name="other-bot",
        chat_connection_id=chat_connection.id,
        embedding_connection_id=fake_connection.id,
        store_id=None,
        system_prompt="",
    )
    outsider = sdk_for(asgi_url, key_create(project=other, name="k", scopes=None, expires_at=None).key)
    with pytest.raises(openai.NotFoundError) as refused:
        outsider.responses.create(model="m", input=QUESTION, tools=searching(team_store))
    assert team_store.id in refused.value.message
    unknown = [{"type": "file_search", "vector_store_ids": ["vs_" + "0" * 24]}]
    with pytest.raises(openai.NotFoundError):
        sdk.responses.create(model="m", input=QUESTION, tools=unknown)
    assert fake_upstream.calls() == 0  # no query embedded, no chat
    outsider.close()


@pytest.mark.parametrize(
    "tool",
    [
        {"type": "file_search"},
        {"type": "file_search", "vector_store_ids": ["vs_1"], "max_num_results": 51},
        {"type": "file_search", "vector_store_ids": ["vs_1"], "filters": {"type": "eq", "key": "a"}},
    ],
    ids=["no stores", "too many results", "bad filter"],
)
def test_a_wrong_file_search_is_a_400_naming_it(sdk, fake_upstream, tool):
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.responses.create(model="m", input=QUESTION, tools=[tool])
    assert "tools[0]" in refused.value.message
    assert fake_upstream.calls("openai.chat") == 0


def test_a_keys_document_scope_holds_in_file_search(asgi_url, v1, project, shared_store, fake_upstream):  # noqa: F811
    scoped = key_create(project=project, name="acme", scopes=None, expires_at=None, filters=parse_filter(ACME)).key
    client = sdk_for(asgi_url, scoped)
    given = given_vector_store(project=project)
    widening = {"type": "eq", "key": "customer", "value": "globex"}
    for filters in (None, widening):
        response = client.responses.create(
            model="m",
            input="What is the refund policy for returned hardware?",
            tools=searching(given, filters=filters, max_num_results=10),
            include=["file_search_call.results"],
        )
        results = response.output[0].results
        assert all(result.attributes == {"customer": "acme"} for result in results)
        assert len(results) == (3 if filters is None else 0)
        assert "GLOBEX" not in sent_context(fake_upstream)
    client.close()


def test_the_stream_sends_the_search_then_the_cited_message(sdk, fake_upstream, team_store):
    fake_upstream.configure("openai.chat", answer=CITING)
    with sdk.responses.stream(model="m", input=QUESTION, tools=searching(team_store)) as stream:
        events = list(stream)
        final = stream.get_final_response()

    kinds = [event.type for event in events]
    assert kinds[: len(SEARCH_OPENING)] == SEARCH_OPENING
    assert kinds[-6:] == [
        "response.output_text.delta",
        "response.output_text.annotation.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    search_id = events[2].item.id
    assert all(event.item_id == search_id for event in events[3:6]) and events[6].item.status == "completed"
    added = events[-5].annotation
    assert (added.type, added.index) == ("file_citation", CITING.index("[1]"))
    [search, message] = final.output
    assert search.type == "file_search_call" and search.queries == [QUESTION]
    assert message.content[0].annotations[0].file_id == added.file_id in file_ids(team_store).values()
    assert final.output_text == CITING


def test_a_stored_file_search_response_continues(sdk, fake_upstream, team_store):
    fake_upstream.configure("openai.chat", answer=CITING)
    first = sdk.responses.create(model="m", input=QUESTION, tools=searching(team_store))
    second = sdk.responses.create(model="m", previous_response_id=first.id, input="And after the launch?")

    assert second.output_text == CITING and [item.type for item in second.output] == ["message"]
    messages = fake_upstream.requests_to("openai.chat")[-1].json()["messages"]
    # The first turn's search is not sent on; its answer is, and the project's store grounds this turn.
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[2]["content"] == CITING and PLANTED_FACT in messages[0]["content"]
    again = sdk.responses.create(model="m", input=[*first.output, {"role": "user", "content": "More?"}])
    assert again.status == "completed"


def test_a_budget_counts_every_stores_query_and_refuses_before_the_upstream(
    sdk, fake_upstream, project, team_store, handbook_store
):
    sdk.responses.create(model="m", input=QUESTION, tools=searching(team_store))
    sdk.responses.create(model="m", input=QUESTION, tools=searching(team_store, handbook_store))
    one, two = wait_for_logs(2, project=project)
    assert one.embedding_tokens > 0 and two.embedding_tokens == 2 * one.embedding_tokens
    assert two.prompt_tokens > 0 and two.completion_tokens > 0

    spent = sum(row.prompt_tokens + row.completion_tokens + row.embedding_tokens for row in (one, two))
    # Reached: the next call is refused (a budget lets one call overshoot it by its own size).
    project_update(project=project, budget_daily_tokens=spent)
    asked = fake_upstream.calls("openai.chat")
    with pytest.raises(openai.RateLimitError) as refused:
        sdk.responses.create(model="m", input=QUESTION, tools=searching(team_store, handbook_store))
    assert refused.value.body["code"] == "budget_daily"
    assert fake_upstream.calls("openai.chat") == asked
    denied = wait_for_logs(3, project=project)[-1]
    assert (denied.endpoint, denied.status_code, denied.completion_tokens) == ("responses", 429, 0)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("provider", ["anthropic", "gemini", "ollama"])
def test_every_provider_family_answers_with_the_citation(
    asgi_url, v1, project, team_store, fake_upstream, provider, stream
):
    from tests.gateway.clients.test_provider_adapters import PROVIDERS, provider_connection

    spec = PROVIDERS[provider]
    project_update(project=project, chat_connection_id=provider_connection(provider, fake_upstream).id)
    fake_upstream.configure(spec["stream_route" if stream else "route"], answer=CITING)
    client = sdk_for(asgi_url, key_create(project=project, name="k", scopes=None, expires_at=None).key)
    request = {"model": "m", "input": QUESTION, "tools": searching(team_store), "include": ["file_search_call.results"]}
    if stream:
        with client.responses.stream(**request) as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(**request)
    client.close()

    search, message = response.output
    [citation] = message.content[0].annotations
    assert response.output_text == CITING and citation.file_id == search.results[0].file_id
    assert citation.index == CITING.index("[1]")


def test_a_route_answers_with_the_citation(asgi_url, v1, project, team_store, upstreams, fresh_cooldowns):
    from tests.gateway.clients.test_routed_chat import make_route

    route = make_route(upstreams)
    project.allowed_routes.add(route)
    for upstream in upstreams:
        upstream.configure("openai.chat", answer=CITING)
    client = sdk_for(asgi_url, key_create(project=project, name="routed", scopes=None, expires_at=None).key)
    response = client.responses.create(model=route.name, input=QUESTION, tools=searching(team_store))
    client.close()

    assert response.model == route.name
    [citation] = response.output[1].content[0].annotations
    assert citation.file_id in file_ids(team_store).values()


@pytest.mark.parametrize(
    "tool",
    [
        {"type": "file_search", "vector_store_ids": ["vs_\x00"]},
        {"type": "file_search", "vector_store_ids": "vs_1"},
        {"type": "file_search", "vector_store_ids": [{"id": "vs_1"}]},
        {"type": "file_search", "vector_store_ids": ["vs_" + "a" * 10_000]},
        {"type": "file_search", "vector_store_ids": ["vs_1"], "max_num_results": 10**40},
        {"type": "file_search", "vector_store_ids": ["vs_1"], "max_num_results": "5"},
        {"type": "file_search", "vector_store_ids": ["vs_1"], "ranking_options": "auto"},
        {"type": "file_search", "vector_store_ids": ["vs_1"], "filters": {"type": "and", "filters": [{}] * 70}},
    ],
)
def test_hostile_file_search_tools_are_4xx_in_the_envelope(v1, project_key, fake_upstream, tool):
    response = v1(project_key).post("/responses", json={"model": "m", "input": QUESTION, "tools": [tool]})
    assert 400 <= response.status_code < 500, response.text
    assert set(response.json()["error"]) >= {"message", "type", "code"}
    assert fake_upstream.calls("openai.chat") == 0


def test_a_store_that_cannot_be_searched_leaves_the_others_to_ground_the_answer(
    sdk, fake_upstream, project, team_store, handbook_store
):
    from stores.models import RagStore
    from tests.gateway.clients.test_provider_adapters import provider_connection

    # A chat-only family: the store can no longer embed a query.
    cannot_embed = provider_connection("anthropic", fake_upstream)
    RagStore.objects.filter(pk=team_store.store_id).update(embedding_connection=cannot_embed)
    response = sdk.responses.create(
        model="m", input=QUESTION, tools=searching(team_store, handbook_store), include=["file_search_call.results"]
    )

    search = response.output[0]
    assert search.status == "incomplete" and [result.filename for result in search.results] == ["handbook.md"]
    assert PLANTED_FACT in sent_context(fake_upstream)
    [row] = wait_for_logs(1, project=project)
    assert row.status_code == 200 and row.rag_skipped_reason.startswith(f"store {team_store.store.name}: ")
