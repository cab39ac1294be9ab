"""The dashboard's sign-in, as a user meets it in a browser."""

import pytest

from tests.factories import PASSWORD
from tests.helpers import sign_in

pytestmark = pytest.mark.browser


def test_the_dashboard_sends_strangers_to_the_sign_in_page(page, personas):
    page.goto("/admin/")
    assert page.url.endswith("/admin/login/?next=/admin/")
    assert page.get_by_role("heading", name="Sign in").is_visible()


def test_a_wrong_password_is_refused_with_a_message(page, personas):
    sign_in(page, "viewer", "not the password")
    assert page.get_by_role("alert").inner_text() == "Wrong username or password."
    assert "/admin/login/" in page.url


def test_signing_in_lands_on_the_dashboard_and_signing_out_leaves_it(page, personas):
    sign_in(page, "editor", PASSWORD)
    assert page.get_by_role("heading", name="Overview").is_visible()
    assert "Signed in as editor (editor)." in page.inner_text("header")
    page.get_by_role("button", name="Sign out").click()
    assert page.get_by_role("heading", name="Sign in").is_visible()
    page.goto("/admin/")
    assert "/admin/login/" in page.url


def test_a_user_without_a_role_is_told_so(page, personas):
    sign_in(page, "outsider", PASSWORD)
    assert "Your account has no role yet" in page.inner_text("main")


def test_repeated_wrong_passwords_are_throttled_with_a_message(page, personas):
    for _ in range(5):
        sign_in(page, "viewer", "not the password")
    sign_in(page, "viewer", PASSWORD)
    assert page.get_by_role("alert").inner_text() == "Too many sign-in attempts. Try again in 1 minute."
    assert "/admin/login/" in page.url
