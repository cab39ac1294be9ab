"""The admission function's source stands in gateway/clients/usage_admit.sql, and a migrated
database holds exactly that function: whether it was created fresh or migrated from an install
that still held 0011's first version."""

from __future__ import annotations

from importlib import import_module
from pathlib import Path

import pytest
from django.db import connection

import gateway.clients

SOURCE = Path(gateway.clients.__file__).with_name("usage_admit.sql").read_text()
LATEST = import_module("gateway.clients.migrations.0012_usage_top_up")


def _admit_functions() -> list[tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_function_identity_arguments(oid), prosrc FROM pg_proc WHERE proname = 'ragmux_usage_admit'"
        )
        return cursor.fetchall()


def _body(source: str) -> str:
    return source.split("$$")[1]


@pytest.mark.django_db
def test_the_migrated_database_holds_the_function_of_the_sql_file():
    (function,) = _admit_functions()

    assert function[1] == _body(SOURCE)


@pytest.mark.django_db
def test_an_install_that_applied_the_first_version_ends_with_the_same_single_function():
    forwards = [operation.sql for operation in LATEST.Migration.operations]
    with connection.cursor() as cursor:
        cursor.execute(f"DROP FUNCTION ragmux_usage_admit({LATEST.ADMIT_SIGNATURE})")
        cursor.execute(
            f"CREATE FUNCTION ragmux_usage_admit({LATEST.FIRST_ADMIT_SIGNATURE}) RETURNS void "
            "LANGUAGE sql AS $$ SELECT $$"
        )
        for statement in forwards:
            cursor.execute(statement)

    assert [body for _, body in _admit_functions()] == [_body(SOURCE)]
