"""A refused form says what is wrong in the form's own words: the field as the form labels it
("Expires (UTC)", "Base URL"), never the API's name for it (expires_at, base_url), and a
validator's stock phrase ("Ensure that there are no more than 6 decimal places") said plainly."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD, ProjectFactory
from tests.helpers import sign_in

pytestmark = pytest.mark.browser


def test_refusals_name_the_fields_as_the_forms_label_them(wide_page, personas, shots):
    project = ProjectFactory(name="support")
    page = wide_page
    sign_in(page, "admin", PASSWORD)

    page.goto(f"/admin/projects/{project.pk}/")
    page.get_by_label("Key name").fill("late")
    page.get_by_label("Expires (UTC)").fill("2020-01-01T00:00")
    page.get_by_role("button", name="Create the key").click()
    expires = page.locator("#errors_expires_at")
    expect(expires).to_have_text("Expires (UTC) must be in the future")
    shots(page, "key-form-error")

    page.goto("/admin/connections/new")
    page.get_by_label("Name", exact=True).fill("nowhere")
    page.get_by_label("Model").fill("gpt-4o-mini")
    page.get_by_label("Base URL").fill("http://no-such-host.invalid/v1")
    page.get_by_role("button", name="Create the connection").click()
    base_url = page.locator("#errors_base_url")
    expect(base_url).to_contain_text("Base URL host 'no-such-host.invalid' cannot be used")
    expect(base_url).not_to_contain_text("base_url")
    shots(page, "connection-form-error")

    page.goto("/admin/prices/")
    page.get_by_role("textbox", name="Model").fill("my-model")
    page.get_by_label("Input, USD per million tokens", exact=True).fill("0.1234567")
    page.get_by_label("Output, USD per million tokens", exact=True).fill("1")
    page.get_by_role("button", name="Add the price").click()
    expect(page.locator("#errors_input_per_mtok")).to_have_text("Use at most 6 digits after the point.")
    shots(page, "price-form-error")
