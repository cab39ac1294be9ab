"""A scrape after an ingestion, a search, a chat, a streamed chat and a failed upstream finds each of
their metric families moved: the web process's own (a worker's: tests/ragmux/launch/test_cli.py)."""

from __future__ import annotations

import re

import pytest

from ingestion.services import IncomingFile, document_upload
from tests.helpers import scrape

pytestmark = pytest.mark.usefixtures("metrics_on")

MESSAGES = [{"role": "user", "content": "What is the launch code for Project Falcon?"}]

# What each step moves (a family's samples summed over their labels).
MOVED_BY_INGESTION = ["ragmux_ingest_jobs_total", "ragmux_ingest_claims_total"]
MOVED_BY_SEARCH = ["ragmux_rag_embed_duration_seconds_count", "ragmux_rag_retrieval_duration_seconds_count"]
MOVED_BY_CHAT = ["ragmux_gateway_upstream_duration_seconds_count"]
MOVED_BY_STREAM = ["ragmux_gateway_time_to_first_token_seconds_count"]
MOVED_BY_FAILURE = ['ragmux_gateway_errors_total{provider="openai",type="http_5xx"}']


def total(text: str, series: str) -> float:
    """The sum of the samples of ``series`` (a name, or a name with all its labels) in ``text``."""
    pattern = rf"^{re.escape(series)}(?:\{{[^}}]*\}})? (\S+)$" if "{" not in series else rf"^{re.escape(series)} (\S+)$"
    return sum(float(value) for value in re.findall(pattern, text, re.MULTILINE))


def moved(before: str, after: str, families: list[str]) -> dict[str, bool]:
    return {family: total(after, family) > total(before, family) for family in families}


def test_each_step_moves_its_families(api, v1, asgi_url, project, project_key, falcon_store, fake_upstream, ingest_now):
    steps = []

    def step(families: list[str], run) -> None:
        before = scrape(asgi_url)
        run()
        steps.append(moved(before, scrape(asgi_url), families))

    def ingest() -> None:
        files = [IncomingFile("more.md", b"# More\n\nThe backup launch code is kept in the vault.")]
        assert document_upload(store=falcon_store, files=files).refusal is None
        ingest_now()

    def search() -> None:
        response = api("viewer").post(f"/admin/api/rag-stores/{falcon_store.pk}/search", json={"query": "launch"})
        assert response.status_code == 200, response.text

    def chat() -> None:
        assert v1(project_key).post("/chat/completions", json={"messages": MESSAGES}).status_code == 200

    def stream() -> None:
        response = v1(project_key).post("/chat/completions", json={"messages": MESSAGES, "stream": True})
        assert response.status_code == 200 and "[DONE]" in response.text

    def fail() -> None:
        fake_upstream.configure("openai.chat", status=500)
        # The upstream's server error is relayed with its status.
        assert v1(project_key).post("/chat/completions", json={"messages": MESSAGES}).status_code == 500

    step(MOVED_BY_INGESTION, ingest)
    step(MOVED_BY_SEARCH, search)
    step(MOVED_BY_CHAT + MOVED_BY_SEARCH, chat)
    step(MOVED_BY_STREAM + MOVED_BY_CHAT, stream)
    step(MOVED_BY_FAILURE, fail)
    assert [family for outcome in steps for family, yes in outcome.items() if not yes] == []

    text = scrape(asgi_url)
    assert total(text, "ragmux_gateway_streams_active") == 0
    assert total(text, 'ragmux_ingest_jobs_total{outcome="ready"}') >= 2
    assert re.search(r'^ragmux_build_info\{python_version="3\.\d+\.\d+",version="[^"]+"\} 1\.0$', text, re.MULTILINE)
