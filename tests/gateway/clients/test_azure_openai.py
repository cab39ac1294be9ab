"""Azure OpenAI behind /v1: the official `openai` package talks to our gateway, the gateway to
an Azure-shaped fake (tests.fakes.azure), through the classic per-deployment paths (with an
`api_version`) and through Azure's v1 API (without one)."""

from __future__ import annotations

import openai
import pytest

from tests.fakes.azure import AZURE_KEY
from tests.fakes.upstream import CHAT_ANSWER
from tests.helpers import wait_for_logs

CLASSIC = "2024-10-21"
# The fake's routes for each kind of path: (chat, embeddings).
ROUTES = {CLASSIC: ("azure.chat", "azure.embeddings"), "": ("azure.v1_chat", "azure.v1_embeddings")}


@pytest.fixture(params=[CLASSIC, ""], ids=["classic", "v1"])
def api_version(request) -> str:
    return request.param


@pytest.fixture
def azure_project(api_version, fake_upstream, transactional_db):
    from gateway.clients.services import project_create
    from gateway.connections.services import connection_create

    def azure(name: str, deployment: str):
        return connection_create(
            name=name,
            provider_type="azure_openai",
            # What the Azure portal shows as the endpoint, with the path a user may paste after it.
            base_url=f"{fake_upstream.url}/openai",
            model_name=deployment,
            dimensions=None,
            api_key=AZURE_KEY,
            api_version=api_version,
        )

    return project_create(
        name="azure-bot",
        chat_connection_id=azure("azure-chat", "chat-prod").id,
        embedding_connection_id=azure("azure-embed", "embed-prod").id,
        store_id=None,
        system_prompt="",
    )


@pytest.fixture
def sdk(asgi_url, v1, azure_project):
    from gateway.clients.services import key_create

    key = key_create(project=azure_project, name="default", scopes=None, expires_at=None).key
    client = openai.OpenAI(base_url=f"{asgi_url}/v1", api_key=key, max_retries=0, timeout=30)
    yield client
    client.close()


def _sent(fake_upstream, route: str):
    [request] = fake_upstream.requests_to(route)
    assert request.headers["api-key"] == AZURE_KEY and "authorization" not in request.headers
    return request


def test_a_chat_completes_through_azure(sdk, fake_upstream, azure_project, api_version):
    completion = sdk.chat.completions.create(model="anything", messages=[{"role": "user", "content": "Hello"}])
    assert completion.choices[0].message.content == CHAT_ANSWER
    assert completion.model == "anything"
    sent = _sent(fake_upstream, ROUTES[api_version][0])
    if api_version:
        assert sent.path == f"/openai/deployments/chat-prod/chat/completions?api-version={CLASSIC}"
    else:
        assert sent.path == "/openai/v1/chat/completions" and sent.json()["model"] == "chat-prod"
    [row] = wait_for_logs(1, project=azure_project)
    assert (row.status_code, row.model, row.tokens_estimated) == (200, "chat-prod", False)
    assert row.completion_tokens == completion.usage.completion_tokens > 0


def test_a_chat_streams_through_azure(sdk, fake_upstream, azure_project, api_version):
    stream = sdk.chat.completions.create(
        model="anything",
        messages=[{"role": "user", "content": "Hello"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == CHAT_ANSWER
    assert chunks[-1].usage.completion_tokens == len(CHAT_ANSWER.split())
    assert _sent(fake_upstream, ROUTES[api_version][0]).json()["stream"] is True
    [row] = wait_for_logs(1, project=azure_project)
    assert (row.status_code, row.streamed, row.tokens_estimated) == (200, True, False)


def test_embeddings_come_through_azure(sdk, fake_upstream, api_version):
    created = sdk.embeddings.create(model="anything", input=["alpha", "beta"])
    assert [len(item.embedding) for item in created.data] == [8, 8]
    assert created.data[0].embedding == pytest.approx(fake_upstream.embedder("alpha", 8), abs=1e-6)
    sent = _sent(fake_upstream, ROUTES[api_version][1])
    expected = f"/openai/deployments/embed-prod/embeddings?api-version={CLASSIC}" if api_version else None
    assert sent.path == (expected or "/openai/v1/embeddings")


@pytest.mark.parametrize(
    ("status", "error_class", "code"),
    [
        # The connection's key, not the client's: a 502.
        (401, openai.InternalServerError, "upstream_auth_failed"),
        (404, openai.NotFoundError, "model_not_found"),
        (429, openai.RateLimitError, "rate_limit_exceeded"),
        (400, openai.BadRequestError, "content_filter"),
    ],
)
def test_azure_errors_reach_the_client_in_openai_terms(sdk, fake_upstream, api_version, status, error_class, code):
    fake_upstream.configure(ROUTES[api_version][0], status=status, error_message=f"refused, key {AZURE_KEY}")
    with pytest.raises(error_class) as refused:
        sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hello"}])
    assert refused.value.code == code
    assert f"(HTTP {status})" in refused.value.message or f"answered HTTP {status}" in refused.value.message
    assert AZURE_KEY not in refused.value.message
