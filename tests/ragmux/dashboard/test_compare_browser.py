"""Search compare as an admin meets it, on a store of a memo and a number table: the backends it
offers are those this database runs, each explained in a line; every hit lists the query words
it holds, shown in its snippet or not; each column shows only the figures its mode has, refusals
are said in the form's words beside their inputs, and the rank markers have a legend."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD
from tests.helpers import LAPTOP, PHONE, sign_in

pytestmark = pytest.mark.browser

# The memo says "30" only after the window its snippet shows; the table says little else.
MEMO = (
    "Contractors must renew their badges every year. "
    + "Unrelated filler sentence. " * 30
    + "A pass expires 30 days after it is issued."
)
TABLE = "Rate table: 30 30 30 30 percent for 30 years."
QUERY = "contractors expires after 30 days"


@pytest.fixture
def memos(fake_connection, ingest_now):
    """A store whose chunks hold each file whole."""
    from ingestion.services import IncomingFile, document_upload
    from stores.services import store_create

    store = store_create(name="memos", values={"embedding_connection_id": fake_connection.id, "chunk_size": 2000})
    files = [IncomingFile("memo.txt", MEMO.encode()), IncomingFile("table.txt", TABLE.encode())]
    assert document_upload(store=store, files=files).refusal is None
    ingest_now()
    return store


def compare_address(store, query: str = QUERY, **sides: str) -> str:
    return "/admin/search/?" + urlencode({"store": store.pk, "q": query, **sides})


def test_the_backends_offered_are_those_the_store_form_offers(wide_page, personas, memos):
    from stores.backends import backend_statuses

    unavailable = [status.id for status in backend_statuses() if not status.available]
    assert unavailable == ["pg_search"]  # the test database has no ParadeDB
    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto(f"/admin/stores/{memos.pk}/settings")
    offered = page.get_by_label("Search backend").locator("option")
    store_form = [
        (option.get_attribute("value"), option.inner_text(), option.is_disabled()) for option in offered.all()
    ]
    page.goto(f"/admin/search/?store={memos.pk}")
    for side in ("a", "b"):
        options = page.locator(f"#{side}-backend option")
        assert [(o.get_attribute("value"), o.inner_text(), o.is_disabled()) for o in options.all()] == store_form
    expect(page.locator("#a-backend option[value=pg_search]")).to_have_text("pg_search (not available here)")

    # Asked for anyway (an old link): refused beside the input, never run as pgvector under its name.
    page.goto(compare_address(memos, **{"a-mode": "lexical", "a-backend": "pg_search", "b-backend": "bm25"}))
    column = page.locator("section.column[data-side=a]")
    expect(page.locator("#a-backend ~ .field-error")).to_contain_text("pg_search cannot run here")
    expect(column.get_by_role("heading")).to_have_text("A: not run")
    expect(column.get_by_role("alert")).to_have_text("Fix the settings of this configuration to run it.")
    expect(column.locator(".backend-ran")).to_have_count(0)
    expect(column.locator(".hit")).to_have_count(0)


def test_the_backends_are_explained_and_each_hit_lists_the_words_it_matched(wide_page, personas, memos, shots):
    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto(
        compare_address(
            memos, **{"a-mode": "lexical", "a-backend": "pgvector", "b-mode": "lexical", "b-backend": "bm25"}
        )
    )
    lines = page.get_by_label("The search backends")
    for backend in ("pgvector", "bm25", "pg_search"):
        expect(lines.locator("dt", has_text=backend)).to_have_count(1)
    expect(lines).to_contain_text("ts_rank_cd")
    for side in ("a", "b"):
        column = page.locator(f"section.column[data-side={side}]")
        memo = column.locator(".hit", has_text="memo.txt")
        expect(memo.locator(".snippet")).not_to_contain_text("30")
        expect(memo.locator(".matched .term")).to_have_text(["contractors", "expires", "30", "days"])
        expect(column.locator(".hit", has_text="table.txt").locator(".matched .term")).to_have_text(["30"])
    shots(page, "search-compare-matched")


def test_each_column_shows_what_applies_and_refusals_are_said_in_words(wide_page, personas, memos, shots):
    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto(compare_address(memos, **{"a-mode": "vector", "b-mode": "hybrid"}))
    vector, hybrid = page.locator("section.column[data-side=a]"), page.locator("section.column[data-side=b]")
    expect(vector.locator(".hit").first).to_be_visible()
    expect(vector.get_by_text("Text search configuration")).to_have_count(0)
    expect(vector.locator(".scores dt", has_text="fused score")).to_have_count(0)
    expect(vector.locator(".scores dt", has_text="fts_rank")).to_have_count(0)
    expect(hybrid.get_by_text("Text search configuration")).to_have_count(1)
    expect(hybrid.locator(".hit").first.locator(".scores dt", has_text="fused score")).to_have_count(1)
    legend = page.locator("#movement-legend")
    expect(legend).to_contain_text("up 2")
    expect(legend).to_contain_text("only here")
    expect(vector.locator(".movement").first).to_have_attribute("aria-describedby", "movement-legend")
    shots(page, "search-compare-vector")

    page.goto(compare_address(memos, **{"a-vector_weight": "0", "a-lexical_weight": "0", "b-top_k": "99"}))
    expect(page.locator("#a-vector_weight ~ .field-error")).to_have_text(
        "Vector weight and Lexical weight cannot both be 0: give one of them a weight."
    )
    expect(page.locator("#b-top_k ~ .field-error")).to_have_text("Top k is at most 50 (0 takes the store's).")
    expect(page.locator("#b-top_k")).to_have_attribute("max", "50")
    assert "fusion_weights" not in page.content()
    shots(page, "search-compare-refused")

    page.goto(compare_address(memos, query="word " * 801))
    expect(page.locator("#errors_q")).to_have_text("The query is too long: 4004 characters, at most 4000.")
    expect(page.get_by_text("Fix the settings of this configuration")).to_have_count(0)
    expect(page.locator("section.column")).to_have_count(0)


def test_an_llm_rerank_that_is_no_ranking_or_fails_keeps_the_fused_order_and_says_why(
    wide_page, personas, handbook, chat_connection, fake_upstream, api, shots
):
    """A reply that only mentions a passage ("[1]") is no ranking: nothing is scored, the fused
    order stands, and the compare page and the search API say why; a 503 is said with its status."""
    from stores.services import store_update

    store_update(
        store=handbook,
        name=handbook.name,
        values={
            "rerank": True,
            "rerank_backend": "llm",
            "rerank_connection_id": chat_connection.pk,
            "search_mode": "hybrid",
        },
    )
    fake_upstream.configure("openai.chat", answer="Passage [1] is about parking; none of them answers the query.")
    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto(f"/admin/search/?store={handbook.pk}")
    page.get_by_label("Query").fill("where do visitors park")
    page.get_by_role("button", name="Compare").click()
    status = page.locator("section.column").nth(0).locator(".rerank-status")
    expect(status).to_contain_text("llm failed after")
    expect(status).to_contain_text(
        "fake-chat: the reranking model's answer is not a list of passage numbers: "
        "“Passage [1] is about parking; none of them answers the query.”"
    )
    expect(status).to_contain_text("the fused order is kept")
    expect(page.locator("section.column").nth(0).locator(".hit", has_text="rerank_score")).to_have_count(0)
    shots(page, "search-compare-rerank-refused")

    fake_upstream.configure("openai.chat", answer=None, status=503)
    page.get_by_role("button", name="Compare").click()
    expect(status).to_contain_text("503")
    body = api("viewer").post(f"/admin/api/rag-stores/{handbook.pk}/search", json={"query": "where do visitors park"})
    assert body.status_code == 200, body.text
    reply = body.json()
    assert reply["rerank_fallback"] is True and reply["reranked"] is False
    assert "503" in reply["rerank_fallback_reason"] and reply["rerank_fallback_reason"].startswith("fake-chat: ")


def test_a_vector_column_names_no_lexical_backend_and_hits_say_nothing_of_a_column_not_run(
    wide_page, personas, memos, shots
):
    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto(compare_address(memos, **{"a-mode": "vector", "b-mode": "hybrid", "b-backend": "bm25"}))
    vector = page.locator("section.column[data-side=a]")
    expect(vector.locator(".backend-ran")).to_have_text("none: a vector search has no lexical side")
    expect(page.locator("section.column[data-side=b] .backend-ran")).to_have_text("bm25")

    # A refused, so not run: B's hits are not "only here", and carry no "A: —".
    page.goto(compare_address(memos, **{"a-mode": "lexical", "a-backend": "pg_search", "b-backend": "bm25"}))
    b = page.locator("section.column[data-side=b]")
    expect(b.locator(".hit").first).to_be_visible()
    expect(b.locator(".movement")).to_have_count(0)
    expect(b.locator(".hit.only-here")).to_have_count(0)
    shots(page, "search-compare-one-run")


def test_the_columns_sit_side_by_side_on_a_laptop_and_switch_on_a_phone(wide_page, personas, memos, shots):
    page = wide_page
    sign_in(page, "viewer", PASSWORD)
    page.set_viewport_size(LAPTOP)
    page.goto(compare_address(memos, **{"a-mode": "lexical", "b-mode": "hybrid"}))
    first, second = (page.locator(f"section.column[data-side={side}]") for side in ("a", "b"))
    assert first.bounding_box()["y"] == second.bounding_box()["y"]
    assert first.bounding_box()["x"] + first.bounding_box()["width"] <= second.bounding_box()["x"]
    expect(page.get_by_role("group", name="Show")).to_be_hidden()

    page.set_viewport_size(PHONE)
    switch = page.get_by_role("group", name="Show")
    expect(switch).to_be_visible()
    expect(first).to_be_visible()
    expect(second).to_be_hidden()
    switch.get_by_label("Configuration B").check()
    expect(second).to_be_visible()
    expect(first).to_be_hidden()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    # The switch stays at hand while the hits are scrolled through.
    second.locator(".hit").last.scroll_into_view_if_needed()
    assert 0 <= switch.bounding_box()["y"] < 100
    shots(page, "search-compare-switched")
