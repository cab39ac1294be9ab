"""Brute-force protection on sign-in, over HTTP: the API login and the dashboard's form."""

import re

import pytest

from tests.factories import PASSWORD, UserFactory

THROTTLED = {"message": "too many login attempts, try again later", "type": "Too Many Requests", "code": "rate_limited"}


def login(client, username, password, **headers):
    return client.post("/admin/api/login", json={"username": username, "password": password}, headers=headers)


def test_the_right_password_is_refused_after_five_wrong_ones_in_a_minute(api):
    client = api()
    remaining = [login(client, "admin", f"guess {n}").json()["error"]["attempts_remaining"] for n in range(5)]
    assert remaining == [4, 3, 2, 1, 0]
    refused = login(client, "admin", PASSWORD)
    assert refused.status_code == 429
    assert refused.json() == {"error": {**THROTTLED, "locked": False}}
    assert refused.headers["Retry-After"] == "60"


def test_unknown_wrong_and_deactivated_get_the_same_answer(api, personas):
    UserFactory(username="gone", role="viewer", is_active=False)
    client = api()
    bodies = [
        login(client, "nobody", PASSWORD).json(),
        login(client, "viewer", "wrong password").json(),
        login(client, "gone", PASSWORD).json(),
    ]
    expected = {"message": "invalid username or password", "type": "Unauthorized", "code": "invalid_credentials"}
    assert bodies == [{"error": {**expected, "attempts_remaining": 4}}] * 3


def test_usernames_match_whatever_their_case_and_share_their_counters(api):
    client = api()
    signed_in = login(client, "EDITOR", PASSWORD)
    assert signed_in.status_code == 200
    assert signed_in.json()["user"]["username"] == "editor"
    login(client, "Editor", "wrong")
    assert login(client, "eDiToR", "wrong").json()["error"]["attempts_remaining"] == 3


def test_an_invalid_request_is_not_counted(api):
    client = api()
    assert client.post("/admin/api/login", json={"username": "admin", "password": ""}).status_code == 400
    assert login(client, "admin", "wrong").json()["error"]["attempts_remaining"] == 4


# Transactional: each thread writes its audit row on a connection of its own, outside the test's
# transaction, and only a flush takes those rows away again.
@pytest.mark.django_db(transaction=True)
def test_guesses_sent_in_parallel_cannot_slip_past_the_limit(api, settings):
    from concurrent.futures import ThreadPoolExecutor

    from django.conf import global_settings

    # Django's real hasher, so each refusal of the unknown name takes long enough for all the
    # requests to be in flight together.
    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS
    settings.LOGIN_USER_LIMIT_PER_MIN = 2
    clients = [api() for _ in range(6)]
    with ThreadPoolExecutor(len(clients)) as pool:
        statuses = sorted(pool.map(lambda client: login(client, "nobody", "guess").status_code, clients))
    assert statuses == [401, 401, 429, 429, 429, 429]


def test_one_address_is_limited_across_usernames(api, settings):
    settings.LOGIN_RATE_LIMIT_PER_MIN = 10
    client = api()
    for n in range(10):
        assert login(client, f"someone{n}", "guess").status_code == 401
    refused = login(client, "viewer", PASSWORD)
    assert refused.status_code == 429
    assert refused.json()["error"]["locked"] is False


def test_guessing_one_account_locks_out_neither_its_owner_elsewhere_nor_others_sharing_the_address(api, settings):
    settings.TRUST_PROXY_HEADERS = True
    client = api()
    nat, elsewhere = {"X-Forwarded-For": "203.0.113.7"}, {"X-Forwarded-For": "192.0.2.1"}
    answers = [login(client, "admin", f"guess {n}", **nat).status_code for n in range(30)]
    assert answers == [401] * 5 + [429] * 25  # the pair's minute limit
    assert login(client, "admin", PASSWORD, **elsewhere).status_code == 200
    # Ten more failures from the NAT, two typos each of five colleagues: the address-wide limit
    # is higher than one account's, so none of them, nor anyone else there, is refused.
    colleagues = [UserFactory(username=f"colleague{n}", role="viewer").username for n in range(6)]
    for name in colleagues[:5]:
        assert [login(client, name, "typo", **nat).status_code for _ in range(2)] == [401, 401]
    assert [login(client, name, PASSWORD, **nat).status_code for name in colleagues] == [200] * 6


def test_forwarded_addresses_are_ignored_unless_a_proxy_is_trusted(api, settings):
    settings.LOGIN_RATE_LIMIT_PER_MIN = 10
    client = api()
    # Without a trusted proxy, a made-up X-Forwarded-For does not buy fresh addresses.
    for n in range(10):
        login(client, f"someone{n}", "guess", **{"X-Forwarded-For": f"203.0.113.{n}"})
    assert login(client, "viewer", PASSWORD, **{"X-Forwarded-For": "203.0.113.99"}).status_code == 429

    settings.TRUST_PROXY_HEADERS = True
    # Behind a trusted proxy, the address it appended (the last one) is the client's.
    assert login(client, "viewer", PASSWORD, **{"X-Forwarded-For": "10.9.9.9, 203.0.113.99"}).status_code == 200
    for n in range(10):
        login(client, f"other{n}", "guess", **{"X-Forwarded-For": f"198.51.100.{n}, 203.0.113.50"})
    assert login(client, "viewer", PASSWORD, **{"X-Forwarded-For": "198.51.100.200, 203.0.113.50"}).status_code == 429


def test_lockout_holds_one_username_from_one_address_only(api, settings):
    settings.TRUST_PROXY_HEADERS = True
    settings.LOGIN_USER_LIMIT_PER_MIN = 0
    settings.LOGIN_RATE_LIMIT_PER_MIN = 0
    settings.LOGIN_LOCKOUT_FAILURES = 3
    client = api()
    attacker = {"X-Forwarded-For": "203.0.113.7"}
    for _ in range(3):
        failure = login(client, "admin", "guess", **attacker)
        assert failure.status_code == 401
        assert "attempts_remaining" not in failure.json()["error"]  # no per-user limit to count down
    locked = login(client, "admin", PASSWORD, **attacker)
    assert locked.status_code == 429
    assert locked.json() == {"error": {**THROTTLED, "locked": True}}
    assert 890 <= int(locked.headers["Retry-After"]) <= 900
    # The stranger did not lock the admin out of their own address, nor other users out of theirs.
    assert login(client, "admin", PASSWORD, **{"X-Forwarded-For": "192.0.2.1"}).status_code == 200
    assert login(client, "viewer", PASSWORD, **attacker).status_code == 200


def test_a_success_does_not_reset_the_count_but_the_window_expires(api, settings):
    client = api()
    for _ in range(4):
        login(client, "viewer", "wrong")
    assert login(client, "viewer", PASSWORD).status_code == 200
    assert login(client, "viewer", "wrong").json()["error"]["attempts_remaining"] == 0
    assert login(client, "viewer", PASSWORD).status_code == 429

    settings.LOGIN_RATE_WINDOW = 0.001  # every failure so far is now older than the window
    assert login(client, "viewer", PASSWORD).status_code == 200


def test_zero_turns_every_limit_off(api, settings):
    settings.LOGIN_USER_LIMIT_PER_MIN = 0
    settings.LOGIN_RATE_LIMIT_PER_MIN = 0
    settings.LOGIN_LOCKOUT_FAILURES = 0
    client = api()
    for _ in range(25):
        assert login(client, "admin", "guess").status_code == 401
    assert login(client, "admin", PASSWORD).status_code == 200


def test_the_sign_in_form_is_throttled_too(api):
    with api() as browser:
        form = browser.get("/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)

        def post(password):
            fields = {"username": "editor", "password": password, "csrfmiddlewaretoken": token}
            return browser.post("/admin/login/", data=fields)

        for _ in range(5):
            assert post("wrong").status_code == 200
        refused = post(PASSWORD)
        assert refused.status_code == 429
        assert refused.headers["Retry-After"] == "60"
        assert "Too many sign-in attempts. Try again in 1 minute." in refused.text
    # The form and the API count the same failures.
    assert login(api(), "editor", PASSWORD).status_code == 429


@pytest.mark.parametrize("bearer", [True, False])
def test_signing_in_stamps_last_login(api, bearer):
    body = api().post("/admin/api/login", json={"username": "viewer", "password": PASSWORD, "bearer": bearer}).json()
    assert body["user"]["last_login_at"] is not None


def outage_lines(caplog) -> list[str]:
    return [record.getMessage().split(" (")[0] for record in caplog.records if record.name == "ragmux.redis"]


def test_with_redis_unreachable_signing_in_works_and_each_process_throttles(
    api, redis_unreachable, caplog, monkeypatch
):
    monkeypatch.setattr("ragmux.core.redis.OUTAGE_RETRY_SECONDS", 0)  # every request tries Redis again
    client = api()
    assert login(client, "admin", PASSWORD).status_code == 200
    remaining = [login(client, "admin", f"guess {n}").json()["error"]["attempts_remaining"] for n in range(5)]
    assert remaining == [4, 3, 2, 1, 0]
    refused = login(client, "admin", PASSWORD)
    assert refused.status_code == 429
    assert refused.headers["Retry-After"] == "60"
    assert outage_lines(caplog) == ["Redis is unreachable"]  # once for the outage, not per request


def test_with_redis_unreachable_the_sign_in_form_works_and_throttles(api, redis_unreachable, caplog):
    def post(browser, password):
        form = browser.get("/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
        return browser.post(
            "/admin/login/", data={"username": "editor", "password": password, "csrfmiddlewaretoken": token}
        )

    with api() as browser:
        assert post(browser, PASSWORD).status_code == 302
    with api() as browser:
        for _ in range(5):
            assert post(browser, "wrong").status_code == 200
        assert post(browser, PASSWORD).status_code == 429
    assert outage_lines(caplog) == ["Redis is unreachable"]


def test_failures_counted_in_the_process_leave_their_window():
    from ragmux.core.signin import LocalWindows

    windows = LocalWindows()
    assert windows.add("user:admin", "a", now=100.0, window=60) == (100.0, 1)
    assert windows.add("user:admin", "b", now=130.0, window=60) == (100.0, 2)
    assert windows.add("user:admin", "c", now=160.0, window=60) == (130.0, 2)  # "a" is 60 s old
    windows.remove(("user:admin",), "b")
    assert windows.add("user:admin", "d", now=161.0, window=60) == (160.0, 2)


def test_windows_kept_in_the_process_are_dropped_once_expired(monkeypatch):
    from ragmux.core.signin import LocalWindows

    monkeypatch.setattr(LocalWindows, "PRUNE_ABOVE", 4)
    windows = LocalWindows()
    for n in range(5):
        windows.add(f"addr:203.0.113.{n}", "guess", now=100.0, window=60)
    assert len(windows) == 5  # over four, but none has expired: the next pass waits for ten
    for n in range(6):
        windows.add(f"addr:198.51.100.{n}", "guess", now=200.0, window=60)
    assert len(windows) == 6  # the eleventh window dropped the five expired ones
