"""The key lookup runs on the event loop's own database connections (ragmux.core.asyncdb)."""

from __future__ import annotations


def test_a_key_lookup_survives_the_database_dropping_its_connections(v1, project, project_key):
    from django.db import connection

    client = v1(project_key)
    assert client.get("/models").status_code == 200
    with connection.cursor() as cursor:
        # What a database restart does to every connection the server keeps.
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    assert client.get("/models").status_code == 200
