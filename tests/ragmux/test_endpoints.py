"""Every admin API route, found in the URLconf: a missing object is a 404 and a method the
route does not serve is a 405, both in the error envelope."""

from __future__ import annotations

import re

import pytest

from tests.helpers import API_METHODS, api_routes, served_methods


def with_missing_ids(route: str) -> str:
    return "/" + re.sub(r"<id:\w+>", "987654321", route)


ROUTES = api_routes()
ROUTES_WITH_IDS = [(route, view) for route, view in ROUTES if "<id:" in route]


def test_the_table_is_built_from_the_urlconf():
    routes = {route for route, _ in ROUTES}
    assert {"admin/api/rag-stores/<id:store_id>", "admin/api/models/<id:connection_id>/test"} <= routes


@pytest.mark.parametrize(("route", "view_class"), ROUTES_WITH_IDS, ids=[r for r, _ in ROUTES_WITH_IDS])
def test_a_missing_object_is_a_404_in_the_envelope(api, route, view_class):
    method = served_methods(view_class)[0]

    response = api("admin").request(method.upper(), with_missing_ids(route))

    assert response.status_code == 404, response.text
    error = response.json()["error"]
    assert error["code"] == "not_found"
    assert error["message"].endswith("not found")


UNSERVED = [(route, view) for route, view in ROUTES if set(API_METHODS) - set(served_methods(view))]


@pytest.mark.parametrize(("route", "view_class"), UNSERVED, ids=[r for r, _ in UNSERVED])
def test_an_unserved_method_is_a_405_in_the_envelope(api, route, view_class):
    method = next(m for m in API_METHODS if m not in served_methods(view_class))

    response = api("admin").request(method.upper(), with_missing_ids(route))

    assert response.status_code == 405, response.text
    assert response.json()["error"]["code"] == "method_not_allowed"
