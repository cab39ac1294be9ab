"""The dashboard's connections, prices, users, own password and audit pages through Django's
test client: who sees which controls, forged posts, what each form does and says, and that no
secret reaches a page."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.test import Client

from gateway.connections.models import ModelConnection, ModelPrice
from ragmux.core.audit import audit_record
from ragmux.core.models import AuditEntry
from tests.factories import PASSWORD, StoreFactory
from tests.helpers import csrf_token, post, text

pytestmark = pytest.mark.django_db

KEY = "sk-fake-key-000000000000"


@pytest.fixture
def price(db):
    return ModelPrice.objects.get(provider_type="openai", model="gpt-4o-mini")


# --- roles ------------------------------------------------------------------------------------


def test_viewers_and_editors_read_connections_and_prices_without_any_control(as_role, fake_connection, price):
    admin_only = ("New connection", "/test", "/edit", "/delete", "Add the price")
    for role in ("viewer", "editor"):
        client = as_role(role)
        for url in ("/admin/connections/", "/admin/prices/"):
            html = client.get(url).content.decode()
            assert [control for control in admin_only if control in html] == [], (role, url)
        assert "fake-openai" in client.get("/admin/connections/").content.decode()
        assert "gpt-4o-mini" in client.get("/admin/prices/").content.decode()
        nav = client.get("/admin/").content.decode()
        assert "/admin/users/" not in nav and "/admin/audit/" not in nav
    admin = as_role("admin").get("/admin/connections/").content.decode()
    assert all(control in admin for control in ("New connection", "/test", "/edit", "/delete"))


@pytest.mark.parametrize("role", ["viewer", "editor"])
@pytest.mark.parametrize(
    "url", ["/admin/users/", "/admin/audit/", "/admin/connections/new", "/admin/prices/{price}/edit"]
)
def test_the_admin_pages_are_refused_to_other_roles(as_role, price, role, url):
    response = as_role(role).get(url.format(price=price.pk))
    assert response.status_code == 403
    assert "This needs the admin role." in response.content.decode()


def test_forged_posts_with_a_valid_csrf_token_are_refused(as_role, personas, fake_connection, price):
    editor = as_role("editor")
    viewer = personas["viewer"]
    forged = {
        "/admin/connections/new": {"name": "x", "provider_type": "openai", "model_name": "m"},
        f"/admin/connections/{fake_connection.pk}/edit": {"name": "renamed", "provider_type": "openai"},
        f"/admin/connections/{fake_connection.pk}/delete": {},
        f"/admin/connections/{fake_connection.pk}/test": {},
        "/admin/prices/new": {"provider_type": "openai", "model": "forged", "input_per_mtok": "1"},
        f"/admin/prices/{price.pk}/edit": {"input_per_mtok": "99", "output_per_mtok": "99"},
        f"/admin/prices/{price.pk}/delete": {},
        "/admin/users/new": {"username": "mallory", "role": "admin", "password": "a long password"},
        f"/admin/users/{viewer.pk}/update": {"role": "admin"},
        f"/admin/users/{viewer.pk}/password": {"password": "a long password"},
    }
    for url, data in forged.items():
        assert post(editor, url, data).status_code == 403, url
    fake_connection.refresh_from_db()
    assert fake_connection.name == "fake-openai" and fake_connection.last_test_at is None
    assert ModelConnection.objects.count() == 1
    assert not ModelPrice.objects.filter(model="forged").exists() and price.source == "builtin"
    assert not User.objects.filter(username="mallory").exists()
    assert personas["viewer"].groups.get().name == "viewer"
    assert not AuditEntry.objects.exclude(action="connection.create").exists()


# --- connections --------------------------------------------------------------------------------


def connection_form(**values) -> dict:
    return {"name": "upstream", "provider_type": "openai", "base_url": "", "model_name": "m", **values}


def test_a_private_host_is_refused_with_the_setting_that_would_allow_it(as_role):
    response = post(as_role("admin"), "/admin/connections/new", connection_form(base_url="http://10.1.2.3:8080/v1"))

    assert response.status_code == 400
    page = text(response)
    assert "To allow this host, add it to PRIVATE_UPSTREAM_ALLOWLIST" in page
    assert "PRIVATE_UPSTREAM_ALLOWLIST=10.1.2.3" in page and "ALLOW_PRIVATE_UPSTREAMS=true" in page
    html = response.content.decode()
    assert 'id="id_base_url"' in html and 'aria-invalid="true"' in html
    assert re.search(r'id="id_base_url"[^>]*aria-describedby="help_base_url errors_base_url"', html)
    assert not ModelConnection.objects.exists()


def test_a_connection_is_created_its_key_masked_and_never_sent_back(as_role, fake_upstream):
    admin = as_role("admin")
    response = post(
        admin,
        "/admin/connections/new",
        connection_form(base_url=f"{fake_upstream.url}/v1", model_name="text-embedding-3-small", api_key=KEY),
    )
    assert response.status_code == 302
    connection = ModelConnection.objects.get(name="upstream")
    listing = admin.get("/admin/connections/").content.decode()
    edit = admin.get(f"/admin/connections/{connection.pk}/edit").content.decode()
    for html in (listing, edit):
        assert KEY not in html and "sk-…0000" in html

    # An edit that leaves the key empty keeps it; a refused one does not echo the typed key.
    refused = post(admin, f"/admin/connections/{connection.pk}/edit", connection_form(dimensions="0", api_key="sk-new"))
    assert refused.status_code == 400 and "sk-new" not in refused.content.decode()
    post(
        admin, f"/admin/connections/{connection.pk}/edit", connection_form(name="renamed", base_url=connection.base_url)
    )
    connection.refresh_from_db()
    assert connection.name == "renamed" and connection.api_key_masked == "sk-…0000"


def test_a_test_shows_the_width_and_latency_or_the_providers_error(as_role, fake_connection, fake_upstream):
    StoreFactory(name="handbook", embedding_connection=fake_connection)
    admin = as_role("admin")
    url = f"/admin/connections/{fake_connection.pk}/test"

    page = text(admin.post(url, {"csrfmiddlewaretoken": csrf_token(admin)}, follow=True))
    assert re.search(
        r"“fake-openai” works\. Tried what it is used for: embeddings \(embeddings of store “handbook”\)\. "
        r"Embeddings answered with vectors of 8 dimensions in \d+ ms\.",
        page,
    )
    assert re.search(r"ok embedding · 8 dimensions in \d+ ms", page)

    fake_upstream.configure("openai.embeddings", status=401)
    page = text(admin.post(url, {"csrfmiddlewaretoken": csrf_token(admin)}, follow=True))
    assert re.search(r"“fake-openai” failed\. .* Embeddings failed after \d+ ms: .*401", page)
    assert re.search(
        r"failed embedding: openai refused the credentials of this gateway.s connection \(HTTP 401\)", page
    )


def test_a_connection_in_use_is_not_deleted_and_the_page_says_by_what(as_role, fake_connection):
    StoreFactory(name="handbook", embedding_connection=fake_connection)
    response = post(as_role("admin"), f"/admin/connections/{fake_connection.pk}/delete")

    assert response.status_code == 409
    assert "connection 'fake-openai' is the embedding model of 'handbook'" in text(response)
    assert ModelConnection.objects.filter(pk=fake_connection.pk).exists()


# --- prices ---------------------------------------------------------------------------------------


def price_row(page_text: str, model: str) -> str:
    return re.search(rf"{re.escape(model)} .*?\$[\d,]+\.\d+", page_text).group(0)


def test_prices_show_their_source_units_and_the_cost_of_one_request(as_role, price):
    ModelPrice.objects.filter(model="gpt-4o").update(source="user", input_per_mtok=3)
    ModelPrice.objects.create(provider_type="openai", model="in-house", input_per_mtok=1, output_per_mtok=2)
    page = text(as_role("viewer").get("/admin/prices/"))

    assert "USD / 1M tokens" in page and "Per search unit USD" in page
    # 1,000 input tokens at $0.15 and 500 output at $0.60 per million.
    assert price_row(page, "gpt-4o-mini") == "gpt-4o-mini 0.15 0.075 — 0.6 — built-in $0.00045"
    assert "gpt-4o 3 1.25 — 10 — yours, overrides the built-in price $0.008" in page
    assert "in-house 1 — — 2 — yours $0.002" in page
    assert "rerank-v3.5 0 — — 0 0.002 built-in $0.002 a search" in page
    # Anthropic's cache writes: 1.25 times the input rate.
    assert "claude-sonnet-4* 3 0.3 3.75 15 — built-in" in page


def test_a_price_preview_does_not_save_and_saving_changes_the_cost(as_role, price):
    admin = as_role("admin")
    url = f"/admin/prices/{price.pk}/edit"
    values = {
        "input_per_mtok": "2",
        "output_per_mtok": "4",
        "cached_input_per_mtok": "",
        "cache_write_per_mtok": "2.5",
        "per_search_unit": "",
    }

    preview = post(admin, url, {**values, "preview": "1"})
    assert "costs $0.004" in text(preview)
    price.refresh_from_db()
    assert price.source == "builtin" and str(price.input_per_mtok.normalize()) == "0.15"

    saved = admin.post(url, {"csrfmiddlewaretoken": csrf_token(admin), **values}, follow=True)
    assert "one request now costs $0.004" in text(saved)
    saved_row = "gpt-4o-mini 2 — 2.5 4 — yours, overrides the built-in price $0.004"
    assert price_row(text(saved), "gpt-4o-mini") == saved_row
    price.refresh_from_db()
    assert price.cache_write_per_mtok == Decimal("2.5")

    restored = admin.post(f"/admin/prices/{price.pk}/delete", {"csrfmiddlewaretoken": csrf_token(admin)}, follow=True)
    assert "Restored the built-in price of openai gpt-4o-mini." in text(restored)


def test_a_price_form_error_is_announced_beside_its_field(as_role, price):
    response = post(as_role("admin"), f"/admin/prices/{price.pk}/edit", {"input_per_mtok": "cheap"})

    assert response.status_code == 400
    html = response.content.decode()
    assert re.search(r'id="id_input_per_mtok"[^>]*aria-describedby="errors_input_per_mtok" aria-invalid="true"', html)
    assert re.search(r'<p class="field-error" id="errors_input_per_mtok">A valid number is required.</p>', html)


# --- users ----------------------------------------------------------------------------------------


def signed_in(user) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def test_an_admin_creates_a_user_changes_the_role_resets_the_password_and_deactivates(as_role):
    admin = as_role("admin")
    created = post(admin, "/admin/users/new", {"username": "erin", "role": "editor", "password": ""})
    generated = re.search(r'<code class="secret">([^<]+)</code>', created.content.decode()).group(1)
    erin = User.objects.get(username="erin")
    assert erin.check_password(generated) and erin.groups.get().name == "editor"

    session = signed_in(erin)
    assert session.get("/admin/").status_code == 200
    post(admin, f"/admin/users/{erin.pk}/update", {"role": "viewer"})
    assert session.get("/admin/").status_code == 302  # a demotion signs the user out

    session = signed_in(erin)
    post(admin, f"/admin/users/{erin.pk}/password", {"password": "another long password"})
    assert session.get("/admin/").status_code == 302
    erin.refresh_from_db()
    assert erin.check_password("another long password")

    session = signed_in(erin)
    response = post(admin, f"/admin/users/{erin.pk}/update", {"is_active": "false"})
    assert response.status_code == 302
    assert session.get("/admin/").status_code == 302
    assert "deactivated" in text(admin.get("/admin/users/"))


def test_the_last_admin_cannot_be_demoted_and_nobody_deactivates_themselves(as_role, personas):
    admin = as_role("admin")
    me = personas["admin"]

    refused = post(admin, f"/admin/users/{me.pk}/update", {"is_active": "false"})
    assert refused.status_code == 400 and "you cannot deactivate your own account" in text(refused)
    refused = post(admin, f"/admin/users/{me.pk}/update", {"role": "editor"})
    assert refused.status_code == 409 and "cannot remove the last active admin" in text(refused)
    assert personas["admin"].groups.get().name == "admin"


def test_a_user_changes_their_own_password_and_only_their_other_sessions_end(personas):
    viewer = personas["viewer"]
    here, elsewhere = signed_in(viewer), signed_in(viewer)

    wrong = post(
        here,
        "/admin/account/password",
        {"current_password": "nope", "new_password": "a new password", "confirm_password": "a new password"},
    )
    assert wrong.status_code == 400
    assert re.search(r'id="errors_current_password">the current password is wrong', wrong.content.decode())
    differ = post(
        here,
        "/admin/account/password",
        {"current_password": PASSWORD, "new_password": "a new password", "confirm_password": "another"},
    )
    assert "The two new passwords differ." in text(differ)

    changed = post(
        here,
        "/admin/account/password",
        {"current_password": PASSWORD, "new_password": "a new password", "confirm_password": "a new password"},
    )
    assert changed.status_code == 302
    assert here.get("/admin/").status_code == 200
    assert elsewhere.get("/admin/").status_code == 302


# --- audit ------------------------------------------------------------------------------------------


def test_the_audit_page_lists_changes_with_before_and_after_and_no_secret(as_role, personas, fake_upstream, price):
    admin = as_role("admin")
    post(
        admin,
        "/admin/connections/new",
        connection_form(base_url=f"{fake_upstream.url}/v1", model_name="text-embedding-3-small", api_key=KEY),
    )
    post(admin, f"/admin/prices/{price.pk}/edit", {"input_per_mtok": "2", "output_per_mtok": "0.6"})
    post(admin, "/admin/users/new", {"username": "erin", "role": "editor", "password": "a secret password"})

    html = admin.get("/admin/audit/").content.decode()
    page = text(admin.get("/admin/audit/"))
    assert KEY not in html and "a secret password" not in html
    assert "admin user.create user #" in page and "username: erin" in page
    assert "price.update price #" in page and "input_per_mtok: 0.15 → 2" in page and "source: builtin → user" in page
    assert "connection.create connection #" in page and "api_key_masked: sk-…0000" in page

    only_prices = text(admin.get("/admin/audit/", {"object_type": "price"}))
    assert "1 entry" in only_prices and "user.create" not in only_prices
    bad = admin.get("/admin/audit/", {"object_id": "many"})
    assert bad.status_code == 400 and 'aria-invalid="true"' in bad.content.decode()


def test_the_audit_pages_keep_the_filters_and_past_the_last_page_show_the_last(as_role, personas):
    for n in range(51):
        audit_record(actor=None, action="store.update", object_type="store", object_id=n + 1, object_repr=f"kb-{n:02}")
    audit_record(actor=None, action="price.update", object_type="price", object_id=1, object_repr="a price")
    admin = as_role("admin")
    first = admin.get("/admin/audit/", {"object_type": "store"}).content.decode()
    assert "Page 1 of 2" in first and "kb-50" in first and "kb-00" not in first
    assert 'href="/admin/audit/?object_type=store&amp;page=2">Older' in first
    past = admin.get("/admin/audit/", {"object_type": "store", "page": "7"})
    assert past.status_code == 200
    last = past.content.decode()
    assert "Page 2 of 2" in last and "kb-00" in last and "kb-01" not in last and "a price" not in last
    assert 'href="/admin/audit/?object_type=store">Newer' in last
