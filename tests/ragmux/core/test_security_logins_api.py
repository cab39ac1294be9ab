"""`GET /admin/api/security/logins`: the wrong passwords of the last hour and day and the latest
refused attempts (read from the audit trail), and the lockouts in force by the limiter's own rule
(read where it counts, in Redis or, while Redis is down, in this process). Admins alone read it."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from ragmux.core.models import AuditEntry
from tests.factories import PASSWORD
from tests.fixtures import PERSONAS

URL = "/admin/api/security/logins"
ATTACKER = "203.0.113.7"


def login(client, username, password, address):
    return client.post(
        "/admin/api/login", json={"username": username, "password": password}, headers={"X-Forwarded-For": address}
    )


@pytest.fixture
def lockout_after_two(settings):
    settings.TRUST_PROXY_HEADERS = True
    settings.LOGIN_USER_LIMIT_PER_MIN = 0
    settings.LOGIN_RATE_LIMIT_PER_MIN = 0
    settings.LOGIN_LOCKOUT_FAILURES = 2


def test_admins_alone_read_it(api):
    for persona in PERSONAS:
        response = api(persona).get(URL)
        assert response.status_code == (200 if persona == "admin" else 403), persona
    assert api().get(URL).status_code == 401
    refused = api("admin").post(URL, json={})
    assert refused.status_code == 405 and refused.json()["error"]["code"] == "method_not_allowed"


def test_nothing_refused_reads_as_zeros_and_empty_lists(api):
    login(api(), "admin", PASSWORD, ATTACKER)
    assert api("admin").get(URL).json() == {
        "failed_last_hour": 0,
        "failed_last_24h": 0,
        "recent_refusals": [],
        "active_lockouts": [],
    }


def test_failures_and_a_lockout_are_reported_with_their_addresses(api, lockout_after_two):
    client = api()
    assert [login(client, "admin", "guess", ATTACKER).status_code for _ in range(2)] == [401, 401]
    assert login(client, "admin", PASSWORD, ATTACKER).status_code == 429
    assert login(client, "viewer", "guess", "192.0.2.1").status_code == 401  # one failure: not locked
    # Older refusals: one of this day, one of the day before.
    for hours in (3, 30):
        old = AuditEntry.objects.create(
            actor_username="anonymous",
            action="login.failure",
            object_type="user",
            object_repr="old",
            client_address=ATTACKER,
        )
        AuditEntry.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(hours=hours))

    body = api("admin").get(URL).json()
    assert (body["failed_last_hour"], body["failed_last_24h"]) == (3, 4)
    assert [(row["action"], row["username"], row["client_address"]) for row in body["recent_refusals"]] == [
        ("login.failure", "viewer", "192.0.2.1"),
        ("login.locked", "admin", ATTACKER),
        ("login.failure", "admin", ATTACKER),
        ("login.failure", "admin", ATTACKER),
        ("login.failure", "old", ATTACKER),
    ]
    (lockout,) = body["active_lockouts"]
    assert (lockout["username"], lockout["client_address"]) == ("admin", ATTACKER)
    until = datetime.fromisoformat(lockout["until"])
    assert timedelta(minutes=14) < until - timezone.now() <= timedelta(minutes=15)


def test_a_lockout_ends_when_its_window_does_and_reads_nothing_when_off(api, lockout_after_two, settings):
    client = api()
    for _ in range(2):
        login(client, "Admin", "guess", ATTACKER)
    assert [lock["username"] for lock in api("admin").get(URL).json()["active_lockouts"]] == ["admin"]
    settings.LOGIN_LOCKOUT_FAILURES = 3  # the rule is the limiter's: two failures no longer lock
    assert api("admin").get(URL).json()["active_lockouts"] == []
    assert login(client, "admin", PASSWORD, ATTACKER).status_code == 200
    settings.LOGIN_LOCKOUT_FAILURES = 0
    assert api("admin").get(URL).json()["active_lockouts"] == []


def test_with_redis_unreachable_the_lockouts_this_process_counted_are_reported(
    api, lockout_after_two, redis_unreachable
):
    client = api()
    for _ in range(2):
        login(client, "editor", "guess", ATTACKER)
    assert login(client, "editor", PASSWORD, ATTACKER).status_code == 429
    body = api("admin").get(URL)
    assert body.status_code == 200
    assert [(lock["username"], lock["client_address"]) for lock in body.json()["active_lockouts"]] == [
        ("editor", ATTACKER)
    ]
