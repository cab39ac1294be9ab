"""The pages that show a secret once (a new or rotated key, a generated password) are the answers
to their forms' posts: reloading one sends the form again, and the answer is the page saying the
secret was already shown, not a second secret. A plain visit of those forms' addresses shows the
page the form is on."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD, ProjectFactory
from tests.helpers import sign_in

pytestmark = pytest.mark.browser


def test_reloading_a_new_key_creates_no_second_key(wide_page, personas, chat_connection, shots):
    from gateway.clients.models import GatewayKey
    from gateway.clients.services import key_create

    project = ProjectFactory(name="falcon-bot", chat_connection=chat_connection)
    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto(f"/admin/projects/{project.pk}/")
    page.get_by_label("Key name").fill("support-app")
    page.get_by_role("button", name="Create the key").click()
    key = page.get_by_role("region", name="New key").locator("#issued-key").inner_text()
    assert key.startswith("sk-proj-")

    page.reload()  # Chromium sends the form's post again
    expect(page.get_by_role("alert")).to_have_text("This key was already created; it is shown only once.")
    expect(page.get_by_role("region", name="New key")).to_have_count(0)
    assert GatewayKey.objects.filter(project=project).count() == 1
    shots(page, "project-key-sent-again")

    rotated = key_create(project=project, name="rotated", scopes=None, expires_at=None)
    page.goto(f"/admin/projects/{project.pk}/")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Rotate rotated").click()
    secret = page.get_by_role("region", name="New key").locator("#issued-key").inner_text()
    page.reload()
    expect(page.get_by_role("alert")).to_have_text("This key was already rotated; its new secret is shown only once.")
    rotated.api_key.refresh_from_db()
    assert rotated.api_key.prefix == secret[: len(rotated.api_key.prefix)]

    for address in (f"/admin/projects/{project.pk}/keys", f"/admin/keys/{rotated.api_key.pk}/rotate"):
        answer = page.goto(address)
        assert answer.status == 200
        expect(page.get_by_role("heading", name="falcon-bot")).to_be_visible()
        assert page.url.endswith(f"/admin/projects/{project.pk}/")
    assert GatewayKey.objects.filter(project=project).count() == 2


def shown_then_reloaded(page, button: str, refusal: str) -> str:
    """Sends a form whose answer shows a generated password, reloads that answer and checks that
    it shows ``refusal`` and no password; the password first shown."""
    page.get_by_role("button", name=button).click()
    shown = page.locator(".banner code.secret").inner_text()
    page.reload()  # Chromium sends the form's post again
    expect(page.get_by_role("alert")).to_have_text(refusal)
    expect(page.locator(".banner code.secret")).to_have_count(0)
    return shown


def test_reloading_a_generated_password_resets_it_no_second_time(wide_page, personas, shots):
    from django.contrib.auth import get_user_model

    page = wide_page
    sign_in(page, "admin", PASSWORD)
    page.goto("/admin/users/")
    page.get_by_label("Username").fill("erin")
    created = shown_then_reloaded(
        page, "Create the user", "This user was already created; a generated password is shown only once."
    )
    erin = get_user_model().objects.get(username="erin")
    assert erin.check_password(created)

    page.goto(f"/admin/users/{erin.pk}/")
    generated = shown_then_reloaded(
        page, "Reset the password", "This password was already reset; a generated password is shown only once."
    )
    erin.refresh_from_db()
    assert erin.check_password(generated)
    shots(page, "user-password-sent-again")

    for address, heading in (("/admin/users/new", "Users"), (f"/admin/users/{erin.pk}/password", "erin")):
        answer = page.goto(address)
        assert answer.status == 200
        expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible()


def test_a_visit_to_any_post_only_address_goes_to_the_page_its_form_is_on(
    wide_page, personas, kb, fake_connection, shots
):
    """Each form's address that answers only a post (a reload, a bookmark, a link shared) shows
    its page, never a bare 405; the sign-out address signs no one out on a visit."""
    from tests.factories import DocumentFactory

    document = DocumentFactory(store=kb)
    store = f"/admin/stores/{kb.pk}/"
    visits = {
        "/admin/prices/new": "/admin/prices/",
        f"/admin/stores/{kb.pk}/upload": store,
        f"/admin/stores/{kb.pk}/text": store,
        f"/admin/stores/{kb.pk}/reprocess": store,
        f"/admin/documents/{document.pk}/reprocess": store,
        f"/admin/documents/{document.pk}/delete": store,
        f"/admin/connections/{fake_connection.pk}/test": "/admin/connections/",
        f"/admin/stores/{kb.pk}/search-settings": f"/admin/search/?store={kb.pk}",
        "/admin/logout/": "/admin/",
    }
    page = wide_page
    sign_in(page, "admin", PASSWORD)
    for address, owner in visits.items():
        response = page.goto(address)
        assert response.status == 200, f"{address}: {response.status}"
        shown = urlsplit(page.url)
        assert shown.path + (f"?{shown.query}" if shown.query else "") == owner, address
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()  # still signed in
