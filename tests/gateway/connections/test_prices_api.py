import pytest

from gateway.connections.prices import BUILTIN_PRICES, upsert_builtin_prices


def find(prices, provider_type, model):
    return next(p for p in prices if p["provider_type"] == provider_type and p["model"] == model)


def test_built_in_prices_are_there_after_migrate(api):
    prices = api("viewer").get("/admin/api/model-prices").json()
    assert len(prices) == len(BUILTIN_PRICES)
    embedding = find(prices, "openai", "text-embedding-3-small")
    assert embedding["input_per_mtok"] == 0.02
    assert embedding["source"] == "builtin"
    cohere = find(prices, "cohere_rerank", "rerank-v3.5")
    assert cohere["per_search_unit"] == 0.002
    # Anthropic's published five-minute cache writes: 1.25 times the input rate.
    sonnet = find(prices, "anthropic", "claude-sonnet-4*")
    assert (sonnet["input_per_mtok"], sonnet["cached_input_per_mtok"], sonnet["cache_write_per_mtok"]) == (3, 0.3, 3.75)
    assert find(prices, "openai", "gpt-4o")["cache_write_per_mtok"] is None


def test_filter_by_provider_type(api):
    prices = api("viewer").get("/admin/api/model-prices", params={"provider_type": "anthropic"}).json()
    assert prices and {p["provider_type"] for p in prices} == {"anthropic"}


def test_admin_adds_a_pattern_price(api):
    admin = api("admin")
    created = admin.post(
        "/admin/api/model-prices",
        json={"provider_type": "custom_openai", "model": "llama-3*", "input_per_mtok": 0.2, "output_per_mtok": 0.6},
    )
    assert created.status_code == 201
    assert created.json()["source"] == "user"
    assert created.json()["cached_input_per_mtok"] is None
    assert created.json()["cache_write_per_mtok"] is None
    edited = admin.put(
        f"/admin/api/model-prices/{created.json()['id']}",
        json={"input_per_mtok": 0.2, "output_per_mtok": 0.6, "cache_write_per_mtok": "0.25"},
    )
    assert edited.json()["cache_write_per_mtok"] == 0.25
    again = admin.post("/admin/api/model-prices", json={"provider_type": "custom_openai", "model": "llama-3*"})
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "duplicate_price"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"provider_type": "openai", "model": "a*b"}, "model"),
        ({"provider_type": "openai", "model": "x", "input_per_mtok": -1}, "input_per_mtok"),
        ({"provider_type": "openai", "model": "x", "output_per_mtok": 100001}, "output_per_mtok"),
        ({"provider_type": "openai", "model": "x", "cache_write_per_mtok": -0.5}, "cache_write_per_mtok"),
        ({"provider_type": "nope", "model": "x"}, "provider_type"),
    ],
)
def test_invalid_prices_are_refused(api, body, field):
    response = api("admin").post("/admin/api/model-prices", json=body)
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]


def test_editing_a_builtin_makes_it_the_users_and_upgrades_leave_it_alone(api):
    admin = api("admin")
    builtin = find(admin.get("/admin/api/model-prices").json(), "openai", "gpt-4o")
    edited = admin.put(f"/admin/api/model-prices/{builtin['id']}", json={"input_per_mtok": 2.0, "output_per_mtok": 8.0})
    assert edited.status_code == 200
    assert edited.json()["source"] == "user"
    upsert_builtin_prices()  # what the next `migrate` does
    after = admin.get(f"/admin/api/model-prices/{builtin['id']}").json()
    assert (after["input_per_mtok"], after["output_per_mtok"], after["source"]) == (2.0, 8.0, "user")


def test_deleting_a_user_override_restores_the_builtin(api):
    admin = api("admin")
    builtin = find(admin.get("/admin/api/model-prices").json(), "openai", "gpt-4o")
    admin.put(f"/admin/api/model-prices/{builtin['id']}", json={"input_per_mtok": 9, "output_per_mtok": 9})
    deleted = admin.delete(f"/admin/api/model-prices/{builtin['id']}").json()
    assert deleted["ok"] is True
    assert deleted["restored"]["source"] == "builtin"
    assert deleted["restored"]["input_per_mtok"] == 2.5


def test_builtin_rows_cannot_be_deleted(api):
    admin = api("admin")
    builtin = find(admin.get("/admin/api/model-prices").json(), "openai", "gpt-4o")
    response = admin.delete(f"/admin/api/model-prices/{builtin['id']}")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "builtin_price"


def test_a_user_price_is_deleted(api):
    admin = api("admin")
    created = admin.post("/admin/api/model-prices", json={"provider_type": "ollama", "model": "llama3"}).json()
    assert admin.delete(f"/admin/api/model-prices/{created['id']}").json() == {"ok": True, "restored": None}
    assert admin.get(f"/admin/api/model-prices/{created['id']}").status_code == 404


@pytest.mark.parametrize("persona", ["editor", "viewer", "outsider"])
def test_only_admins_write_prices(api, persona):
    admin = api("admin")
    price = find(admin.get("/admin/api/model-prices").json(), "openai", "gpt-4o")
    client = api(persona)
    attempts = [
        client.post("/admin/api/model-prices", json={"provider_type": "openai", "model": "new"}),
        client.put(f"/admin/api/model-prices/{price['id']}", json={"input_per_mtok": 0}),
        client.delete(f"/admin/api/model-prices/{price['id']}"),
    ]
    assert [r.status_code for r in attempts] == [403, 403, 403]


def test_no_credentials_is_401_on_price_writes(api):
    assert api().post("/admin/api/model-prices", json={"provider_type": "openai", "model": "x"}).status_code == 401
