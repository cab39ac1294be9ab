"""PostgreSQL out of reach: database-backed requests answer 503 `database_unavailable` with
`Retry-After` in their path's envelope, at once when the server refuses connections and within
the connect timeout when it hangs, and the next request once it is back is answered as usual.

The production server runs in its own process with its database behind a TCP proxy that plays
the server stopping and hanging (tests/fakes/tcp_proxy.py); the suite's database is untouched.
"""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import httpx
import pytest

from ragmux.launch.embedded import free_port
from tests.fakes.tcp_proxy import TcpProxy
from tests.helpers import web_process

# The server's DATABASE_CONNECT_TIMEOUT: libpq's least, so that a hang is quickly over.
CONNECT_TIMEOUT = 2
# A refused connection fails in milliseconds: the issue's ~2 s, and half a second more for the
# request itself on a loaded machine.
REFUSED_BOUND = 2.5
HUNG_BOUND = CONNECT_TIMEOUT + 3


@pytest.fixture
def database_proxy(subprocess_env):
    proxy = TcpProxy(urlsplit(subprocess_env["DATABASE_URL"]).port).start()
    yield proxy
    proxy.stop()


@pytest.fixture
def served(subprocess_env, database_proxy, transactional_db, settings):
    """The server, connecting to its database through the proxy."""
    database = urlsplit(subprocess_env["DATABASE_URL"])
    env = {
        **subprocess_env,
        "DATABASE_URL": database._replace(netloc=f"{database.username}@127.0.0.1:{database_proxy.port}").geturl(),
        "DATABASE_CONNECT_TIMEOUT": str(CONNECT_TIMEOUT),
    }
    settings.PORT, settings.WEB_WORKERS = free_port(), 1
    with web_process(env) as process:
        yield process.url


@pytest.fixture
def callers(served, personas):
    """One database-backed request of each kind: the admin API (a bearer token), `/v1` (a gateway
    key) and the dashboard (a signed-in session)."""
    from django.conf import settings
    from django.test import Client

    from ragmux.core.authentication import issue_admin_token
    from tests.factories import GatewayKeyFactory

    token = issue_admin_token(user=personas["admin"])
    key = GatewayKeyFactory().secret
    browser = Client()
    browser.force_login(personas["admin"])
    session = browser.cookies[settings.SESSION_COOKIE_NAME].value
    http = httpx.Client(base_url=served, timeout=60)
    signed_in = httpx.Client(base_url=served, timeout=60, cookies={settings.SESSION_COOKIE_NAME: session})
    yield {
        "admin api": lambda: http.get("/admin/api/rag-stores", headers={"Authorization": f"Bearer {token}"}),
        "v1": lambda: http.get("/v1/models", headers={"Authorization": f"Bearer {key}"}),
        "dashboard": lambda: signed_in.get("/admin/"),
    }
    http.close()
    signed_in.close()


def timed(call) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = call()
    return response, time.monotonic() - started


def assert_unavailable(name: str, response: httpx.Response) -> None:
    assert response.status_code == 503, (name, response.text)
    assert int(response.headers["Retry-After"]) > 0
    if name == "admin api":
        error = response.json()["error"]
        assert (error["type"], error["code"]) == ("Service Unavailable", "database_unavailable")
    elif name == "v1":
        error = response.json()["error"]
        assert (error["type"], error["code"]) == ("server_error", "database_unavailable")
    else:
        assert response.headers["Content-Type"].startswith("text/plain")


def assert_unavailable_within(callers, bound: float) -> None:
    for name, call in callers.items():
        for _ in range(2):  # the request that meets the outage, and one that knows of it
            response, seconds = timed(call)
            assert_unavailable(name, response)
            assert seconds < bound, name


def assert_served(callers) -> None:
    for name, call in callers.items():
        assert timed(call)[0].status_code == 200, name


def test_a_refused_database_answers_503_at_once_in_each_envelope_and_the_next_request_after_it(
    served, database_proxy, callers
):
    assert_served(callers)
    database_proxy.refuse()
    assert_unavailable_within(callers, REFUSED_BOUND)
    assert httpx.get(f"{served}/healthz").status_code == 200
    database_proxy.forward()
    assert_served(callers)


# psycopg_pool tries a failed connection again after about 1 s, then 2, 4 and 8 s more (each
# ±10 %): a pool whose attempts began failing when the database went away tries again at ~1, ~3,
# ~7 and ~15 s. Refused for longer than ~7.7 s, its next attempt is seconds after the end.
BACKOFF_OUTAGE = 8


@pytest.mark.parametrize("first_back, second_back", [("v1", "dashboard"), ("dashboard", "v1")])
def test_a_pool_backing_off_from_a_refused_database_serves_as_soon_as_another_pool_finds_it_back(
    served, database_proxy, callers, first_back, second_back
):
    """`/v1`'s key lookup and the dashboard check out from two pools, whose attempts fail and back
    off during the outage. The first request back reconnects its own pool, and with it the process
    knows of no outage: a checkout from the other pool must not wait for that pool's next attempt."""
    assert_served(callers)
    database_proxy.refuse()
    refused_at = time.monotonic()
    while time.monotonic() - refused_at < BACKOFF_OUTAGE:  # the first requests of the outage included
        for name in (first_back, second_back):
            response, seconds = timed(callers[name])
            assert_unavailable(name, response)
            assert seconds < REFUSED_BOUND, name
    database_proxy.forward()
    for name in (first_back, second_back):
        response, seconds = timed(callers[name])
        assert response.status_code == 200, name
        assert seconds < REFUSED_BOUND, name


# A statement waits half a second before its server is asked whether it answers, and the question
# takes half a second more at most; a second more for the request on a loaded machine.
FROZEN_BOUND = 2.5


def test_a_frozen_database_answers_503_within_a_second_or_two_and_recovers(served, database_proxy, callers):
    assert_served(callers)
    # As a server whose every process is stopped: its connections stay open and carry nothing, and
    # new ones are accepted but never served.
    database_proxy.freeze()
    assert_unavailable_within(callers, FROZEN_BOUND)
    ready, seconds = timed(lambda: httpx.get(f"{served}/readyz", timeout=30))
    assert ready.status_code == 503 and seconds < 1.5
    database_proxy.forward()
    assert_served(callers)


def test_a_hung_database_answers_503_within_the_connect_timeout(served, database_proxy, callers):
    assert_served(callers)
    # As a stopped server's: the open connections go, and new ones are accepted but never served.
    database_proxy.refuse()
    database_proxy.hang()
    for name, call in callers.items():
        response, seconds = timed(call)
        assert_unavailable(name, response)
        assert seconds < HUNG_BOUND, name
    database_proxy.forward()
    assert_served(callers)


def test_a_checkout_waits_for_a_busy_pool_and_not_for_one_whose_connections_fail(monkeypatch):
    import psycopg
    from psycopg_pool import ConnectionPool, PoolTimeout

    from ragmux.core import postgresql

    busy = ConnectionPool(open=False)  # no attempt of its own has failed
    monkeypatch.setattr(postgresql.outage, "failure", None)
    wait = postgresql.CheckoutWait()
    assert not wait.should_reconnect(busy)  # another slice
    monkeypatch.setattr(postgresql.outage, "failure", psycopg.OperationalError("connection refused"))
    with pytest.raises(psycopg.OperationalError, match="out of reach: connection refused"):
        wait.should_reconnect(busy)  # the pool's attempt failed while this checkout waited

    # A checkout that starts while an outage is known tries a connection of its own.
    assert postgresql.CheckoutWait().should_reconnect(busy)

    monkeypatch.setattr(postgresql.outage, "failure", None)
    wait.deadline = time.monotonic()
    with pytest.raises(PoolTimeout, match=f"after {postgresql.POOL_WAIT:g} sec"):
        wait.should_reconnect(busy)


def test_a_checkout_from_a_pool_whose_own_attempts_failed_tries_a_connection_of_its_own(monkeypatch):
    """Though the process knows of no outage: another pool may have found the database back while
    this one waits out its backoff."""
    from psycopg_pool import ConnectionPool

    from ragmux.core import postgresql

    monkeypatch.setattr(postgresql.outage, "failure", None)
    with ConnectionPool(f"host=127.0.0.1 port={free_port()}", min_size=1, open=True) as refused:
        deadline = time.monotonic() + 10
        while not refused.get_stats().get("connections_errors") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert postgresql.CheckoutWait().should_reconnect(refused)
