"""The audit trail and the sign-ins page as an admin meets them in a browser: a stranger guessing
a password until locked out shows on the sign-ins page, a document uploaded on the store page
links to its entries, and the trail filters by action prefix. axe-core checks each page."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD
from tests.helpers import sign_in
from tests.ragmux.dashboard.accessibility import assert_accessible

pytestmark = pytest.mark.browser


def test_an_admin_follows_a_document_to_its_entries_and_reads_the_refused_sign_ins(
    wide_page, personas, kb, shots, browser, live_server, settings
):
    settings.LOGIN_USER_LIMIT_PER_MIN = 0
    settings.LOGIN_LOCKOUT_FAILURES = 2
    stranger = browser.new_context(base_url=live_server.url).new_page()
    for _ in range(3):
        sign_in(stranger, "viewer", "a guess")
    expect(stranger.get_by_role("alert")).to_contain_text("Too many failed sign-ins for this account")
    stranger.context.close()

    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.get_by_role("link", name="Stores").click()
    page.get_by_role("link", name="kb", exact=True).click()
    page.get_by_label("Files to upload").set_input_files(
        [{"name": "memo.md", "mimeType": "text/markdown", "buffer": b"# Memo\n\nThe tide turns at noon."}]
    )
    page.get_by_role("button", name="Upload", exact=True).click()
    expect(page.locator("[data-upload-results] li")).to_contain_text("accepted")
    page.get_by_role("link", name="Audit entries of memo.md").click()

    expect(page.get_by_label("Document id")).to_have_value(re.compile(r"^\d+$"))
    rows = page.locator("table.audit tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-action", "document.upload")
    expect(rows.first).to_contain_text("admin")
    expect(rows.first).to_contain_text("127.0.0.1")
    expect(rows.first).to_contain_text("filename: memo.md")
    shots(page, "audit-document")

    page.get_by_role("link", name="Clear").click()
    page.get_by_label("Action starts with").fill("login.")
    page.get_by_role("button", name="Filter").click()
    actions = page.locator("table.audit tbody tr").evaluate_all("rows => rows.map(row => row.dataset.action)")
    assert actions == ["login.success", "login.locked", "login.failure", "login.failure"]
    expect(page.get_by_role("link", name="Export these as NDJSON")).to_have_attribute(
        "href", "/admin/api/audit.ndjson?action=login."
    )
    assert_accessible(page)

    page.get_by_role("link", name="Refused sign-ins and lockouts").click()
    expect(page.get_by_role("heading", name="Sign-ins", exact=True)).to_be_visible()
    expect(page.get_by_role("link", name="Sign-ins", exact=True)).to_have_attribute("aria-current", "page")
    expect(page.locator("#failed-last-hour")).to_have_text("2")
    lockouts = page.locator("table.lockouts tbody tr")
    expect(lockouts).to_have_count(1)
    expect(lockouts.first).to_contain_text("viewer")
    expect(lockouts.first).to_contain_text("127.0.0.1")
    expect(page.locator("table.refusals tbody tr[data-action='login.locked']")).to_have_count(1)
    shots(page, "sign-ins")


def test_retry_all_failed_leaves_an_entry_per_document_and_one_store_entry_found_under_store(
    wide_page, personas, kb, shots
):
    from tests.factories import DocumentFactory

    failed = [DocumentFactory(store=kb, status="failed", error="no text found") for _ in range(2)]
    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto(f"/admin/stores/{kb.pk}/")
    page.get_by_role("button", name="Retry all failed (2)").click()
    page.goto(f"/admin/audit/?object_type=store&object_id={kb.pk}")
    rows = page.locator("table.audit tbody tr")
    expect(rows).to_have_count(2)  # its creation, and the retry
    expect(rows.first).to_have_attribute("data-action", "store.reprocess")
    expect(rows.first.locator(".changes li")).to_have_text(["status: failed", "documents: 2"])
    shots(page, "audit-store")
    for document in failed:
        page.goto(f"/admin/audit/?document={document.pk}")
        expect(page.locator("table.audit tbody tr[data-action='document.reprocess']")).to_have_count(1)


def test_sign_in_outcomes_are_words_and_a_deactivated_user_is_told_so_only_with_the_right_password(
    wide_page, personas, browser, live_server, shots
):
    from tests.factories import UserFactory

    UserFactory(username="gone", role="viewer", is_active=False)
    visitor = browser.new_context(base_url=live_server.url).new_page()
    sign_in(visitor, "gone", "a guess")
    expect(visitor.get_by_role("alert")).not_to_contain_text("deactivated")
    sign_in(visitor, "gone", PASSWORD)
    expect(visitor.get_by_role("alert")).to_contain_text("This account is deactivated. Ask an admin to reactivate it.")
    sign_in(visitor, "nobody", "a guess")
    visitor.context.close()

    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto("/admin/security/sign-ins/")
    outcomes = page.locator("table.refusals tbody td.outcome-words")
    expect(outcomes).to_have_text(
        ["refused: unknown username", "refused: deactivated account", "refused: wrong password"]
    )
    expect(page.locator("table.refusals")).not_to_contain_text("login.failure")
    shots(page, "sign-ins-outcomes")
