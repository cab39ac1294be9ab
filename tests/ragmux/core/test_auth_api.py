import ipaddress

import pytest

from tests.factories import PASSWORD


def test_login_with_bearer_returns_a_token_that_authenticates(api):
    anonymous = api()
    response = anonymous.post("/admin/api/login", json={"username": "editor", "password": PASSWORD, "bearer": True})
    assert response.status_code == 200
    body = response.json()
    assert body["user"]["username"] == "editor"
    assert body["user"]["role"] == "editor"
    me = anonymous.get("/admin/api/me", headers={"Authorization": f"Bearer {body['token']}"})
    assert me.status_code == 200
    assert me.json()["role"] == "editor"


def test_wrong_password_is_401_in_the_error_envelope(api):
    response = api().post("/admin/api/login", json={"username": "admin", "password": "nope", "bearer": True})
    assert response.status_code == 401
    assert response.json() == {
        "error": {
            "message": "invalid username or password",
            "type": "Unauthorized",
            "code": "invalid_credentials",
            "attempts_remaining": 4,
        }
    }


def test_login_without_bearer_sets_the_session_cookie(api):
    with api() as browser:
        response = browser.post("/admin/api/login", json={"username": "viewer", "password": PASSWORD})
        assert response.status_code == 200
        assert "token" not in response.json()
        assert "ragmux_session" in browser.cookies
        assert browser.get("/admin/api/me").json()["username"] == "viewer"


def test_logout_revokes_the_bearer_token(api):
    anonymous = api()
    token = anonymous.post(
        "/admin/api/login", json={"username": "viewer", "password": PASSWORD, "bearer": True}
    ).json()["token"]
    headers = {"Authorization": f"Bearer {token}"}
    assert anonymous.post("/admin/api/logout", headers=headers).json() == {"ok": True}
    assert anonymous.get("/admin/api/me", headers=headers).status_code == 401


@pytest.mark.parametrize("path", ["/admin/api/me", "/admin/api/models", "/admin/api/model-prices"])
def test_no_credentials_is_401(api, path):
    response = api().get(path)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_an_unknown_token_is_401(api):
    response = api().get("/admin/api/me", headers={"Authorization": "Bearer not-a-token"})
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "invalid or expired token"


def test_an_outsider_without_a_role_may_read_nothing(api):
    response = api("outsider").get("/admin/api/models")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"


def test_api_responses_are_not_cached_and_carry_a_request_id(api):
    response = api("viewer").get("/admin/api/me")
    assert response.headers["Cache-Control"] == "no-store"
    assert len(response.headers["X-Request-Id"]) == 32


@pytest.mark.parametrize("path", ["/admin/api", "/admin/api/no-such-thing", "/admin/api/no/such/thing/"])
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_unknown_api_path_is_a_json_404(api, path, method):
    response = api("viewer").request(method, path)
    assert response.status_code == 404
    assert response.json() == {"error": {"message": "not found", "type": "Not Found", "code": "not_found"}}


def test_health_and_readiness(api):
    client = api()
    assert client.get("/healthz").status_code == 200
    assert client.head("/healthz").status_code == 200
    ready = client.get("/readyz")
    assert ready.status_code == 200
    body = ready.json()
    assert body == {
        "ready": True,
        "status": "ok",
        "migrations": body["migrations"],
        "expected_migrations": body["migrations"],
    }
    assert body["migrations"] > 0


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_probes_refuse_other_methods_in_the_error_envelope(api, path):
    response = api().post(path)
    assert response.status_code == 405
    assert response.headers["Allow"] == "GET, HEAD"
    assert response.json()["error"]["code"] == "method_not_allowed"


def test_signing_in_purges_expired_tokens(api, personas):
    from datetime import timedelta

    from django.utils import timezone

    from ragmux.core.authentication import hash_token
    from ragmux.core.models import AdminToken

    AdminToken.objects.create(
        user=personas["viewer"], token_hash=hash_token("stale"), expires_at=timezone.now() - timedelta(seconds=1)
    )
    response = api().post("/admin/api/login", json={"username": "viewer", "password": PASSWORD, "bearer": True})
    assert response.status_code == 200
    assert not AdminToken.objects.filter(token_hash=hash_token("stale")).exists()
    assert AdminToken.objects.filter(token_hash=hash_token(response.json()["token"])).exists()


@pytest.mark.parametrize(
    ("trusted", "proxy_networks", "secure"),
    [
        (True, [], True),
        (False, [], False),
        # With TRUSTED_PROXY_CIDRS, only a peer inside them (the test client is 127.0.0.1) is believed.
        (True, ["127.0.0.0/8"], True),
        (True, ["10.0.0.0/8"], False),
    ],
)
def test_the_session_cookie_is_secure_when_a_trusted_proxy_says_https(api, settings, trusted, proxy_networks, secure):
    settings.TRUST_PROXY_HEADERS = trusted
    settings.TRUSTED_PROXY_CIDRS = [ipaddress.ip_network(network) for network in proxy_networks]
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if trusted else None
    response = api().post(
        "/admin/api/login",
        json={"username": "viewer", "password": PASSWORD},
        headers={"X-Forwarded-Proto": "https"},
    )
    assert response.status_code == 200
    cookie = next(c for c in response.headers.get_list("set-cookie") if c.startswith("ragmux_session="))
    assert ("; Secure" in cookie) is secure


@pytest.mark.parametrize(("trusted", "header"), [("true", "('HTTP_X_FORWARDED_PROTO', 'https')"), ("false", "None")])
def test_forwarded_proto_is_honoured_only_when_proxy_headers_are_trusted(subprocess_env, trusted, header):
    import subprocess
    import sys

    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings as s; print(s.SECURE_PROXY_SSL_HEADER)",
        ],
        env={**subprocess_env, "DJANGO_SETTINGS_MODULE": "ragmux.settings", "TRUST_PROXY_HEADERS": trusted},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.stdout.strip() == header, shown.stderr
