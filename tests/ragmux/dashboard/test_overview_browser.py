"""The overview in a browser before any traffic, and money as the dashboard shows it: cents,
and a sub-cent cost by its first significant digits."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.factories import PASSWORD, ProjectFactory, RequestLogFactory
from tests.helpers import sign_in

pytestmark = pytest.mark.browser


def test_an_overview_without_traffic_says_so_and_a_sub_cent_cost_is_not_rounded_away(wide_page, personas, shots):
    page = wide_page
    sign_in(page, "viewer", PASSWORD)
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    for name, label in (("day", "last 24 hours"), ("week", "last 7 days")):
        expect(page.locator(f".no-traffic[data-range={name}]")).to_have_text(
            f"No traffic yet: no request went through the gateway in the {label}."
        )
    expect(page.locator("[data-chart]")).to_have_count(0)
    expect(page.get_by_text("$0.000000")).to_have_count(0)
    shots(page, "overview-empty")

    call = RequestLogFactory(project=ProjectFactory(name="support"), cost_micros=4_200)
    page.reload()
    expect(page.locator("[data-range=day] .cost")).to_have_text("$0.0042")
    expect(page.locator("[data-chart] canvas")).to_have_count(6)
    page.goto("/admin/request-logs/")
    expect(page.locator(f"tr[data-log='{call.pk}']")).to_contain_text("$0.0042")
