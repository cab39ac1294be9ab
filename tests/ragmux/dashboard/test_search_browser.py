"""Search compare in a browser: a typo corrected under the stemming `english` index is shown
as the word the documents use, not as the stem the query is run with."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD
from tests.helpers import sign_in

pytestmark = pytest.mark.browser


def test_a_typo_correction_shows_the_word_the_documents_use(wide_page, personas, kb, ingest_now, shots):
    from ingestion.services import IncomingFile, document_upload

    files = [
        IncomingFile("contract.md", b"# Contract\n\nThe liability of each party is capped. Liability ends here."),
        IncomingFile("memo.md", b"# Memo\n\nLiabilities are listed in the annex."),
    ]
    assert document_upload(store=kb, files=files).refusal is None
    ingest_now()
    page = wide_page
    sign_in(page, "viewer", PASSWORD)
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    page.goto(f"/admin/search/?store={kb.pk}")
    page.get_by_label("Query").fill("liabilty")
    for side in ("a", "b"):
        page.locator(f"#{side}-mode").select_option("lexical")
        page.locator(f"#{side}-typo_tolerance").check()
    page.get_by_role("button", name="Compare").click()
    columns = page.locator("section.column")
    expect(columns).to_have_count(2)
    for n in range(2):
        corrections = columns.nth(n).locator("dt", has_text="Corrections").locator("xpath=following-sibling::dd")
        expect(corrections).to_have_text("liabilty → liability")
    expect(columns.nth(0).locator(".hit").first).to_be_visible()
    # "Matched:" names the words the hit holds, as written, not the stem "liabil".
    for matched in columns.nth(0).locator(".hit .matched").all():
        expect(matched).to_have_text("Matched: liability")
    shots(page, "search-typo")
