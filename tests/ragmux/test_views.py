"""The health probes: `/readyz` answers within a second whatever is down or hanging, and only the
database (or its missing migrations) takes a web process out of rotation; `/healthz` never
depends on either. `/metrics` on the public port: absent unless enabled, then for its token."""

from __future__ import annotations

import time

import pytest

from ragmux.launch.embedded import free_port
from tests.fakes.tcp_proxy import TcpProxy
from tests.helpers import METRICS_AUTHORIZATION, METRICS_TOKEN, off_the_main_thread

# READY_CHECK_SECONDS, with room for a loaded machine.
ANSWER_BOUND = 1.5


@pytest.fixture(autouse=True)
def _migrations_read_at_start(db):
    """What a web process does before it serves (ragmux/asgi.py): the migration plan is worked
    out once, so a probe only checks that the migrations table has not changed since."""
    from ragmux.core import readiness

    readiness.migration_state()


@pytest.fixture
def proxy():
    """A server that refuses or hangs, as each test makes it (it forwards to nothing that answers)."""
    proxy = TcpProxy(free_port()).start()
    yield proxy
    proxy.stop()


def timed_get(client, path: str):
    started = time.monotonic()
    response = client.get(path)
    return response, time.monotonic() - started


@pytest.mark.parametrize("failure", ["refuse", "hang"])
def test_readyz_says_503_within_a_second_without_the_database(api, proxy, failure, monkeypatch):
    from django.db import connection

    getattr(proxy, failure)()
    # New connections (the probe's own) go to the proxy; the test's own connection stays open.
    monkeypatch.setitem(connection.settings_dict, "PORT", str(proxy.port))
    response, seconds = timed_get(api(), "/readyz")
    assert response.status_code == 503
    assert response.json()["ready"] is False
    assert seconds < ANSWER_BOUND
    assert api().get("/healthz").status_code == 200


@pytest.mark.parametrize("failure", ["refuse", "hang"])
def test_readyz_stays_ready_without_redis_and_says_it_is_degraded(api, proxy, failure):
    from django.test import override_settings

    getattr(proxy, failure)()
    # Not the `settings` fixture: the suite's own Redis must be back before the test's teardown.
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{proxy.port}/0"):
        response, seconds = timed_get(api(), "/readyz")
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["ready"], body["status"], body["degraded"]) == (True, "ok", ["redis"])
    assert seconds < ANSWER_BOUND


@pytest.mark.django_db(transaction=True)
def test_readyz_says_migrating_while_a_migration_is_not_applied_and_ready_once_it_is(api):
    from django.db import connection
    from django.db.migrations.recorder import MigrationRecorder

    ready = off_the_main_thread(api().get, "/readyz")
    assert (ready.status_code, ready.json()["status"]) == (200, "ok")
    expected = ready.json()["expected_migrations"]
    assert ready.json()["migrations"] == expected
    latest = MigrationRecorder.Migration.objects.latest("id")
    latest.delete()  # what the database of a build one migration older holds
    try:
        response = off_the_main_thread(api().get, "/readyz")
        assert response.status_code == 503
        assert response.json() == {
            "ready": False,
            "status": "migrating",
            "migrations": expected - 1,
            "expected_migrations": expected,
        }
    finally:
        MigrationRecorder(connection).record_applied(latest.app, latest.name)
    after = off_the_main_thread(api().get, "/readyz")
    assert (after.status_code, after.json()["status"], after.json()["migrations"]) == (200, "ok", expected)


@pytest.mark.django_db(transaction=True)
def test_readyz_stays_ready_and_names_the_degraded_features(api, fake_connection):
    from django.db import connection
    from django.db.migrations.recorder import MigrationRecorder

    from stores.models import RagStore
    from stores.services import store_create

    store = store_create(name="kb", values={"embedding_connection_id": fake_connection.id})
    RagStore.objects.filter(pk=store.pk).update(search_backend="pg_search")  # saved before it went away
    newer = MigrationRecorder(connection)
    newer.record_applied("stores", "9999_from_a_newer_build")
    try:
        response = off_the_main_thread(api().get, "/readyz")
    finally:
        newer.record_unapplied("stores", "9999_from_a_newer_build")
    assert response.status_code == 200
    assert response.json()["degraded"] == [
        "the database has 1 migration(s) this build does not know (a newer build migrated it)",
        "pg_search is not installed on this server; 1 rag store(s) configured for it fall back to pgvector",
    ]


def test_metrics_are_absent_unless_enabled(api):
    response = api("admin").get("/metrics", headers=METRICS_AUTHORIZATION)
    assert response.status_code == 404
    assert "ragmux_" not in response.text


@pytest.mark.parametrize(
    "authorization",
    [
        "",
        "Bearer ",
        f"Bearer {METRICS_TOKEN}x",
        f"Basic {METRICS_TOKEN}",
        METRICS_TOKEN,
        "Bearer wrong-but-long-enough",
    ],
)
def test_metrics_refuse_a_scrape_without_the_token(api, metrics_on, authorization):
    # Signed in as an admin is not enough either: the token is the metrics' only credential.
    response = api("admin").get("/metrics", headers={"Authorization": authorization} if authorization else {})
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert "ragmux_" not in response.text


def test_metrics_are_served_for_the_token_and_never_cached(api, metrics_on):
    response = api().get("/metrics", headers=METRICS_AUTHORIZATION)
    assert response.status_code == 200
    assert response.headers["Cache-Control"] == "no-store"
    assert response.headers["Content-Type"].startswith("text/plain; version=")
    assert "ragmux_build_info{" in response.text
    assert api().post("/metrics", headers=METRICS_AUTHORIZATION).status_code == 405


def test_the_public_port_does_not_serve_the_metrics_of_a_listener_of_their_own(api, metrics_on, settings):
    settings.METRICS_LISTEN = ("127.0.0.1", free_port())
    assert api().get("/metrics", headers=METRICS_AUTHORIZATION).status_code == 404


def test_the_probes_answer_by_address_whatever_allowed_hosts_lists(api, settings):
    """`ragmux serve` waits for `/healthz` on 127.0.0.1, and orchestrators probe a process by its
    address: a production ALLOWED_HOSTS that names only the public host must not fail them."""
    settings.ALLOWED_HOSTS = ["ragmux.example.com"]
    client = api()
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    assert client.get("/admin/login/").status_code == 400
