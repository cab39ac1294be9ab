"""The official `cohere` package against our `/v1/rerank`, with a project key."""

from __future__ import annotations

import cohere
import httpx
import pytest

from tests.helpers import wait_for_logs

DOCUMENTS = ["Carson City is in Nevada.", "Saipan is in the Pacific.", "Washington, D.C. is the capital."]


@pytest.fixture
def co(asgi_url, v1, project_key, rerank_connection, falcon_store):
    """A Cohere client whose rerank reaches our /v1/rerank (its v1 path), the falcon store
    reranking through a Cohere connection answered by the fake upstream."""
    from stores.models import RagStore

    connection = rerank_connection("cohere_rerank")
    RagStore.objects.filter(pk=falcon_store.pk).update(rerank_connection=connection, rerank_backend="cohere")
    # `v1` for its teardown, which waits for the request log rows.
    with httpx.Client(timeout=30) as http:
        yield cohere.Client(api_key=project_key, base_url=asgi_url, max_retries=0, httpx_client=http)


def test_rerank(co, fake_upstream, project):
    response = co.rerank(model="rerank-v3.5", query="What is the capital?", documents=DOCUMENTS, top_n=2)

    assert [(result.index, result.relevance_score) for result in response.results] == [(2, 0.99), (1, 0.98)]
    assert response.meta.billed_units.search_units == 1
    assert response.meta.tokens.input_tokens > 0
    sent = fake_upstream.requests_to("cohere.rerank")[0].json()
    assert (sent["model"], sent["top_n"], sent["documents"]) == ("rerank-v3.5", 2, DOCUMENTS)
    [row] = wait_for_logs(1, project=project)
    assert (row.endpoint, row.status_code, row.model) == ("rerank", 200, "rerank-v3.5")
    assert row.rerank_tokens == response.meta.tokens.input_tokens


def test_return_documents_gives_each_result_its_text(co):
    response = co.rerank(model="rerank-v3.5", query="capital?", documents=DOCUMENTS, top_n=2, return_documents=True)
    assert [(result.index, result.document.text) for result in response.results] == [
        (2, DOCUMENTS[2]),
        (1, DOCUMENTS[1]),
    ]
    plain = co.rerank(model="rerank-v3.5", query="capital?", documents=DOCUMENTS, top_n=2)
    assert [result.document for result in plain.results] == [None, None]


def test_the_v2_client_reranks_through_the_v2_path(asgi_url, co, project_key, fake_upstream, project):
    with httpx.Client(timeout=30) as http:
        v2 = cohere.ClientV2(api_key=project_key, base_url=asgi_url, httpx_client=http)
        response = v2.rerank(model="rerank-v3.5", query="What is the capital?", documents=DOCUMENTS, top_n=2)
    assert [(result.index, result.relevance_score) for result in response.results] == [(2, 0.99), (1, 0.98)]
    [row] = wait_for_logs(1, project=project)
    assert (row.endpoint, row.status_code) == ("rerank", 200)


@pytest.mark.parametrize("path", ["/v1/no-such-thing", "/v2/chat", "/v2/rerank/extra", "/v1"])
def test_an_unknown_client_api_path_is_a_json_404_in_openais_envelope(asgi_url, project_key, path):
    answer = httpx.post(f"{asgi_url}{path}", json={}, headers={"Authorization": f"Bearer {project_key}"})
    assert answer.status_code == 404
    assert answer.headers["content-type"].startswith("application/json")
    error = answer.json()["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "unknown_url")
    assert error["message"] == f"Invalid URL (POST {path})"


def test_an_unknown_model_is_a_not_found_error(co):
    with pytest.raises(cohere.NotFoundError) as raised:
        co.rerank(model="rerank-nope", query="q", documents=DOCUMENTS)
    assert raised.value.status_code == 404
    assert raised.value.body["error"]["code"] == "model_not_found"
