"""The start-up steps `ragmux serve` takes once per database."""

import threading

import psycopg
import pytest
from django.contrib.auth.models import User
from django.db import connection, connections

from ragmux.launch.first_run import START_UP_LOCK, ensure_first_admin, one_start_at_a_time
from tests.helpers import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def other_session():
    """A connection of its own to the test database, as another replica's would be."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**params, autocommit=True)


def waiting_for_the_lock() -> bool:
    with other_session() as session:
        return (
            session.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = %s",
                [START_UP_LOCK & 0xFFFFFFFF],
            ).fetchone()[0]
            == 1
        )


def test_a_second_replica_waits_for_the_first_and_then_finds_the_admin_made():
    notices: list[str | None] = []

    def start_as_the_second_replica() -> None:
        try:
            with one_start_at_a_time():
                notices.append(ensure_first_admin())
        finally:
            connections.close_all()

    with other_session() as first:
        first.execute("SELECT pg_advisory_lock(%s)", [START_UP_LOCK])
        second = threading.Thread(target=start_as_the_second_replica)
        second.start()
        wait_until(waiting_for_the_lock, timeout=30, message="the second start to wait for the lock")
        assert notices == []
        # The first replica makes the admin, then lets go.
        first_notice = ensure_first_admin()
        first.execute("SELECT pg_advisory_unlock(%s)", [START_UP_LOCK])
    second.join(timeout=30)
    assert not second.is_alive()
    assert first_notice is not None and notices == [None]
    assert User.objects.filter(groups__name="admin").count() == 1
