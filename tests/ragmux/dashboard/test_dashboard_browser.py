"""The dashboard as its users meet it in a browser: an editor uploads and watches ingestion, a
viewer is shown (and allowed) only reading, an admin creates a store and saves a compared
configuration, and changes a store's index language and watches its lexical index being rebuilt.
Every page is photographed (see the `shots` fixture)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD
from tests.helpers import PHONE, WIDE, drop_files, sign_in
from tests.ragmux.dashboard.accessibility import assert_accessible

pytestmark = pytest.mark.browser

FILES = Path(__file__).resolve().parents[2] / "ingestion" / "files"
DROPPED = {
    "tide-pools.pdf": "application/pdf",
    "python-docx-test.docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "field-notes.md": "text/markdown",
}
# A question whose lexical ranking differs between full text (ts_rank_cd) and BM25 on those files.
# Ranked differently by ts_rank_cd and BM25 on the dropped files; under the default `english`
# index "and" is a stop word and "pools" matches "pool" too.
QUERY = "rock pools and water"
MARKABLE = {"rock", "rocks", "pool", "pools", "water", "waters"}


def compare(page, store_id: int, query: str, a: dict, b: dict) -> None:
    page.goto(f"/admin/search/?store={store_id}")
    page.get_by_label("Query").fill(query)
    for side, settings in (("a", a), ("b", b)):
        for name, value in settings.items():
            page.locator(f"#{side}-{name}").select_option(value)
    page.get_by_role("button", name="Compare").click()


def test_an_editor_uploads_watches_ingestion_and_compares_searches(wide_page, personas, kb, ingest_now, shots):
    page = wide_page
    sign_in(page, "editor", PASSWORD)
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    page.get_by_role("link", name="Stores").click()
    page.get_by_role("link", name="kb").click()
    page.evaluate("window.notReloaded = true")

    drop_files(page, "[data-dropzone]", {name: ((FILES / name).read_bytes(), mime) for name, mime in DROPPED.items()})
    results = page.locator("[data-upload-results] li")
    expect(results).to_have_count(3)
    for name in DROPPED:
        expect(results.filter(has_text=name)).to_contain_text("accepted")
    rows = page.locator("#documents tbody tr")
    expect(rows).to_have_count(3)
    expect(page.locator("#documents tr[data-status=pending]")).to_have_count(3)
    shots(page, "store-ingesting")

    ingest_now()  # the worker's own code, in this process, while the page keeps polling
    expect(page.locator("#documents tr[data-status=ready]")).to_have_count(3, timeout=30_000)
    assert page.evaluate("window.notReloaded") is True
    pdf = rows.filter(has_text="tide-pools.pdf")
    expect(pdf.locator("td[data-label=Pages]")).to_have_text("3")
    expect(pdf.locator("progress")).to_have_attribute("value", "100")
    expect(page.locator("#documents")).to_have_attribute("data-moving", "false")

    page.set_viewport_size(PHONE)
    page.reload()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    expect(page.get_by_label("Files to upload")).to_be_visible()
    shots(page, "store")
    page.set_viewport_size(WIDE)

    compare(page, kb.pk, QUERY, a={"mode": "lexical", "backend": "pgvector"}, b={"mode": "lexical", "backend": "bm25"})
    columns = page.locator("section.column")
    expect(columns).to_have_count(2)
    expect(columns.nth(0).locator(".backend-ran")).to_have_text("pgvector")
    expect(columns.nth(1).locator(".backend-ran")).to_have_text("bm25")
    expect(columns.nth(0).locator(".hit").first).to_be_visible()
    expect(columns.nth(1).locator(".hit").first).to_be_visible()
    moved = columns.nth(0).locator(".hit.moved").first
    expect(moved).to_contain_text("B: #")
    expect(moved.locator(".movement")).to_contain_text("up" if "up" in moved.inner_text() else "down")
    marked = columns.nth(0).locator("mark").all_inner_texts()
    assert marked and {word.lower() for word in marked} <= MARKABLE
    expect(page.get_by_role("button", name="Save A as the store's settings")).to_have_count(0)
    shots(page, "search-compare")

    page.get_by_role("link", name="Overview").click()
    expect(page.get_by_role("heading", name="Ingestion backlog")).to_be_visible()
    shots(page, "overview")


def test_a_viewer_sees_no_upload_control_and_a_forged_upload_is_refused(wide_page, personas, kb):
    from stores.models import Document

    page = wide_page
    sign_in(page, "viewer", PASSWORD)
    page.goto(f"/admin/stores/{kb.pk}/")
    expect(page.get_by_role("heading", name="kb")).to_be_visible()
    expect(page.get_by_label("Files to upload")).to_have_count(0)
    expect(page.locator("[data-upload]")).to_have_count(0)
    expect(page.get_by_role("button", name="Add the text")).to_have_count(0)

    token = page.locator("input[name=csrfmiddlewaretoken]").first.input_value()
    forged = page.request.post(
        f"/admin/stores/{kb.pk}/upload",
        multipart={
            "csrfmiddlewaretoken": token,
            "files": {"name": "forged.md", "mimeType": "text/markdown", "buffer": b"# Forged\n\nNot allowed."},
        },
        headers={"X-CSRFToken": token},
    )
    assert forged.status == 403
    assert "Not allowed" in forged.text()
    assert not Document.objects.filter(store=kb).exists()


def test_an_admin_creates_a_store_and_saves_a_compared_configuration(
    wide_page, personas, fake_connection, ingest_now, shots
):
    from ingestion.services import IncomingFile, document_upload
    from stores.models import RagStore

    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.get_by_role("link", name="Stores").click()
    page.get_by_role("link", name="New store").click()
    page.get_by_label("Name").fill("handbook")
    page.get_by_label("Embedding connection").select_option(
        label=f"{fake_connection.name} (openai · text-embedding-3-small)"
    )
    page.get_by_label("Chunk size").fill("100")
    page.get_by_role("button", name="Create store").click()
    expect(page.locator("#errors_chunk_size")).to_contain_text("between 200 and 20000")
    page.get_by_label("Chunk size").fill("200")
    page.get_by_label("Chunk overlap").fill("0")
    page.get_by_label("Maximum documents").fill("10")
    page.get_by_label("Maximum bytes").fill("1000000")
    page.get_by_role("button", name="Create store").click()
    expect(page.get_by_role("status")).to_have_text("Created the store “handbook”. Upload documents to fill it.")
    store = RagStore.objects.get(name="handbook")
    assert (store.chunk_size, store.chunk_overlap, store.search_backend) == (200, 0, "bm25")
    assert (store.max_documents, store.max_bytes) == (10, 1_000_000)

    files = [IncomingFile(name, (FILES / name).read_bytes()) for name in DROPPED]
    assert document_upload(store=store, files=files).refusal is None
    ingest_now()
    page.get_by_role("link", name="Stores").click()
    row = page.get_by_role("row", name="handbook")
    expect(row).to_contain_text("3 of 10 documents")
    expect(row.locator("meter").first).to_have_attribute("value", "3")
    shots(page, "stores")
    page.goto(f"/admin/stores/{store.pk}/settings")
    shots(page, "store-settings")

    compare(
        page, store.pk, QUERY, a={"mode": "hybrid", "backend": "bm25"}, b={"mode": "lexical", "backend": "pgvector"}
    )
    page.get_by_role("button", name="Save B as the store's settings").click()
    expect(page.get_by_role("status")).to_have_text("Saved configuration B as the search settings of “handbook”.")
    store.refresh_from_db()
    assert (store.search_mode, store.search_backend) == ("lexical", "pgvector")
    expect(page.locator("section.column")).to_have_count(2)


def test_an_admin_changes_the_index_language_and_watches_the_rebuild(wide_page, personas, kb, ingest_now):
    from ingestion.services import IncomingFile, document_upload
    from stores.rebuild import lexical_index_rebuild

    files = [IncomingFile(name, (FILES / name).read_bytes()) for name in DROPPED]
    assert document_upload(store=kb, files=files).refusal is None
    ingest_now()
    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.get_by_role("link", name="Stores").click()
    page.get_by_role("link", name="kb", exact=True).click()
    state = page.locator("#lexical-index")
    expect(state).to_have_text("english — ready")
    page.get_by_role("link", name="Settings").click()
    language = page.get_by_label("Index language")
    expect(language).to_have_value("english")
    expect(language.locator("option[value=german]")).to_have_count(1)
    language.select_option("simple")
    page.get_by_role("button", name="Save settings").click()
    expect(page.get_by_role("status")).to_contain_text("Its lexical index is being rebuilt in simple")
    expect(state).to_have_text("rebuilding from english to simple: queued")
    assert_accessible(page)

    page.get_by_role("link", name="Documents").click()
    expect(state).to_have_text("rebuilding from english to simple: queued")
    expect(state).to_have_attribute("hx-trigger", "every 2s")
    assert_accessible(page)
    page.evaluate("window.notReloaded = true")
    assert lexical_index_rebuild(store_id=kb.pk) == "rebuilt"  # the worker's job, while the page polls
    expect(state).to_have_text("simple — ready", timeout=10_000)
    expect(state).not_to_have_attribute("hx-trigger", "every 2s")
    assert page.evaluate("window.notReloaded") is True


def test_an_admin_sets_up_reranking_and_compares_reranked_and_not(
    wide_page, personas, kb, fake_upstream, rerank_connection, ingest_now, shots
):
    from ingestion.services import IncomingFile, document_upload

    cohere = rerank_connection("cohere_rerank")
    files = [IncomingFile(name, (FILES / name).read_bytes()) for name in DROPPED]
    assert document_upload(store=kb, files=files).refusal is None
    ingest_now()
    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto(f"/admin/stores/{kb.pk}/settings")
    connections = page.get_by_label("Rerank connection")
    offered = connections.locator(f'option[value="{cohere.pk}"]')
    expect(offered).to_be_disabled()  # the backend is llm: the Cohere connection does not fit
    page.get_by_label("Rerank backend").select_option("cohere")
    expect(offered).to_be_enabled()
    expect(connections.locator(f'option[value="{kb.embedding_connection_id}"]')).to_be_disabled()
    page.get_by_label("Rerank", exact=True).check()
    connections.select_option(str(cohere.pk))
    assert_accessible(page)
    shots(page, "store-rerank-settings")
    page.get_by_role("button", name="Save settings").click()
    expect(page.get_by_role("status")).to_contain_text("Saved")
    kb.refresh_from_db()
    assert (kb.rerank, kb.rerank_backend, kb.rerank_connection_id) == (True, "cohere", cohere.pk)

    # The store reranks: B is the same configuration unreranked, side by side.
    page.goto(f"/admin/search/?store={kb.pk}")
    expect(page.locator("#a-rerank")).to_be_checked()
    expect(page.locator("#b-rerank")).not_to_be_checked()
    page.get_by_label("Query").fill(QUERY)
    page.get_by_role("button", name="Compare").click()
    columns = page.locator("section.column")
    expect(columns.nth(0).locator(".rerank-status")).to_contain_text("reranked by cohere in")
    expect(columns.nth(1).locator(".rerank-status")).to_have_text("off")
    pool = fake_upstream.requests_to("cohere.rerank")[-1].json()["documents"]
    first = columns.nth(0).locator(".hit").first
    expect(first).to_contain_text("rerank_score")
    # The fake ranks in reverse: A's first hit is the last candidate, which B does not show first.
    assert columns.nth(0).locator(".hit").first.get_attribute("data-chunk") != (
        columns.nth(1).locator(".hit").first.get_attribute("data-chunk")
    )
    assert len(pool) >= 2
    assert_accessible(page)
    shots(page, "search-compare-rerank")
