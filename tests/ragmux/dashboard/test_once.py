"""One-time form tokens on the forms whose answer shows a secret once: sent again, such a form
creates nothing and says why; sent without its token, it does nothing; visited, its address
shows the page the form is on."""

from __future__ import annotations

import pytest

from tests.factories import ProjectFactory
from tests.helpers import post, text

pytestmark = pytest.mark.django_db


@pytest.fixture
def project(chat_connection):
    return ProjectFactory(name="support", chat_connection=chat_connection)


def test_a_key_form_sent_twice_creates_one_key(as_role, project):
    from gateway.clients.models import GatewayKey

    admin = as_role("admin")
    form = {"name": "web", "scopes": ["chat"], "once": "token-of-one-page"}
    assert post(admin, f"/admin/projects/{project.pk}/keys", form).status_code == 201
    again = post(admin, f"/admin/projects/{project.pk}/keys", form)
    assert again.status_code == 409
    assert "This key was already created; it is shown only once." in text(again)
    assert 'id="issued-key"' not in again.content.decode()
    assert GatewayKey.objects.filter(project=project).count() == 1


def test_a_refused_key_form_can_be_corrected_and_sent_with_the_same_token(as_role, project):
    admin = as_role("admin")
    address = f"/admin/projects/{project.pk}/keys"
    assert post(admin, address, {"name": "", "once": "t"}).status_code == 400
    assert post(admin, address, {"name": "web", "scopes": ["chat"], "once": "t"}).status_code == 201


def test_a_form_without_its_token_does_nothing(as_role, project, personas):
    from gateway.clients.models import GatewayKey

    admin = as_role("admin")
    missing = post(admin, f"/admin/projects/{project.pk}/keys", {"name": "web", "once": ""})
    assert missing.status_code == 400 and "sent without its one-time token" in text(missing)
    refused = post(admin, f"/admin/users/{personas['viewer'].pk}/password", {"password": "", "once": ""})
    assert refused.status_code == 400
    assert not GatewayKey.objects.exists()


def test_a_password_reset_sent_twice_generates_one_password(as_role, personas):
    admin = as_role("admin")
    viewer = personas["viewer"]
    form = {"password": "", "once": "reset-page"}
    first = post(admin, f"/admin/users/{viewer.pk}/password", form)
    generated = first.context["generated"]
    assert first.status_code == 200 and generated
    again = post(admin, f"/admin/users/{viewer.pk}/password", form)
    assert again.status_code == 409 and "This password was already reset" in text(again)
    viewer.refresh_from_db()
    assert viewer.check_password(generated)


def test_visiting_a_forms_address_shows_the_page_it_is_on(as_role, project, personas):
    from gateway.clients.services import key_create

    admin = as_role("admin")
    key = key_create(project=project, name="app", scopes=None, expires_at=None).api_key
    viewer = personas["viewer"].pk
    for address, page in (
        (f"/admin/projects/{project.pk}/keys", f"/admin/projects/{project.pk}/"),
        (f"/admin/projects/{project.pk}/limits", f"/admin/projects/{project.pk}/"),
        (f"/admin/keys/{key.pk}/rotate", f"/admin/projects/{project.pk}/"),
        (f"/admin/keys/{key.pk}/revoke", f"/admin/projects/{project.pk}/"),
        ("/admin/users/new", "/admin/users/"),
        (f"/admin/users/{viewer}/update", f"/admin/users/{viewer}/"),
        (f"/admin/users/{viewer}/password", f"/admin/users/{viewer}/"),
    ):
        answer = admin.get(address)
        assert (answer.status_code, answer.url) == (302, page), address
    key.refresh_from_db()
    assert key.revoked_at is None
    assert as_role("editor").get(f"/admin/keys/{key.pk}/rotate").status_code == 403
    assert admin.get("/admin/keys/999999/rotate").status_code == 404
